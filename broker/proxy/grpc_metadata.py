"""What a call says of its 5.x client: its metadata (the clients' Signature.metadata) and its peer."""
from __future__ import annotations

import functools


def client_id_of(context) -> str:
    """x-mq-client-id: the client instance, as its Telemetry stream and heartbeats name it."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value
    return ""


def peer_host(context) -> str:
    """'ipv4:127.0.0.1:5555' / 'ipv6:[::1]:5555' → the host."""
    return _host_of(context.peer() or "")


def host_of_peer(peer: str | None) -> str:
    """peer_host of a peer string already asked of the context (None: an unknown one, '')."""
    return _host_of(peer or "")


@functools.lru_cache(maxsize=4096)  # one parse per connection, not one per send
def _host_of(peer: str) -> str:
    kind, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if kind in ("ipv4", "ipv6") else rest
    return host.strip("[]")
