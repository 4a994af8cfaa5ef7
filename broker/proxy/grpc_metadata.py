"""What a 5.x client says of itself in every call's metadata (the clients' Signature.metadata)."""
from __future__ import annotations


def client_id_of(context) -> str:
    """x-mq-client-id: the client instance, as its Telemetry stream and heartbeats name it."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id":
            return value
    return ""
