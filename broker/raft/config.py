"""DLedgerConfig: the broker.conf keys of DLedger mode, with RocketMQ's names and DLedger's defaults.

RocketMQ reads four keys for it from broker.conf (MessageStoreConfig: `enableDLegerCommitLog`,
`dLegerGroup`, `dLegerPeers`, `dLegerSelfId`, plus `preferredLeaderId`) and leaves the Raft
timings at DLedger 0.3.1.2's defaults (DLedgerConfig). We read those timings from broker.conf too,
under DLedger's own names, so an operator can shorten a failover without a code change.

`dLegerPeers` is `n0-host:port;n1-host:port;…`: the id is everything before the first `-`, the
address everything after it (MemberState's parse). A group needs three peers or more: with two, a
single death leaves no majority and the group can never elect, which DLedger lets an operator find
out in production; we refuse it at start, naming the key.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from broker.store.errors import StoreConfigError

MIN_PEERS = 3


@dataclass(frozen=True)
class Peer:
    id: str
    host: str
    port: int

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


def parse_peers(text: str, key: str = "dLegerPeers") -> dict[str, Peer]:
    """`n0-host:port;n1-host:port` -> {id: Peer}, in the order written; StoreConfigError naming
    `key` for anything DLedger could not connect with."""
    peers: dict[str, Peer] = {}
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        peer_id, sep, addr = item.partition("-")
        if not sep or not peer_id:
            raise StoreConfigError(key, f"{item!r} is not id-host:port")
        host, colon, port_text = addr.rpartition(":")
        if not colon or not host:
            raise StoreConfigError(key, f"{item!r}: {addr!r} is not host:port")
        try:
            port = int(port_text)
        except ValueError:
            raise StoreConfigError(key, f"{item!r}: {port_text!r} is not a port") from None
        if not 0 < port < 65536:
            raise StoreConfigError(key, f"{item!r}: {port} is not a port")
        if peer_id in peers:
            raise StoreConfigError(key, f"peer id {peer_id!r} appears twice")
        peers[peer_id] = Peer(peer_id, host, port)
    return peers


@dataclass
class DLedgerConfig:
    enableDLegerCommitLog: bool = False
    dLegerGroup: str = ""
    dLegerPeers: str = ""
    dLegerSelfId: str = ""
    preferredLeaderId: str = ""
    # DLedger 0.3.1.2 DLedgerConfig defaults (milliseconds)
    heartBeatTimeIntervalMs: int = 2000
    maxHeartBeatLeak: int = 3
    minVoteIntervalMs: int = 300
    maxVoteIntervalMs: int = 1000
    maxWaitAckTimeMs: int = 2500
    maxPushTimeOutMs: int = 1000
    maxPendingRequestsNum: int = 10_000
    peers: dict[str, Peer] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def self_peer(self) -> Peer:
        return self.peers[self.dLegerSelfId]

    def validate(self) -> None:
        for key in ("heartBeatTimeIntervalMs", "maxHeartBeatLeak", "minVoteIntervalMs", "maxWaitAckTimeMs",
                    "maxPushTimeOutMs", "maxPendingRequestsNum"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        if self.maxVoteIntervalMs <= self.minVoteIntervalMs:
            # DLedger draws random.nextInt(max - min): it throws on a range of zero or less
            raise StoreConfigError("maxVoteIntervalMs", f"{self.maxVoteIntervalMs} must exceed minVoteIntervalMs "
                                   f"({self.minVoteIntervalMs})")
        if not self.enableDLegerCommitLog:
            return
        if not self.dLegerGroup:
            raise StoreConfigError("dLegerGroup", "must be set with enableDLegerCommitLog=true (RocketMQ uses the "
                                   "brokerName)")
        self.peers = parse_peers(self.dLegerPeers)
        if len(self.peers) < MIN_PEERS:
            raise StoreConfigError("dLegerPeers", f"{len(self.peers)} peer(s): a DLedger group needs at least "
                                   f"{MIN_PEERS}, or one death leaves no majority to elect a leader")
        if self.dLegerSelfId not in self.peers:
            raise StoreConfigError("dLegerSelfId", f"{self.dLegerSelfId!r} is not one of the ids in dLegerPeers "
                                   f"({', '.join(self.peers)})")
        if self.preferredLeaderId and self.preferredLeaderId not in self.peers:
            raise StoreConfigError("preferredLeaderId", f"{self.preferredLeaderId!r} is not one of the ids in "
                                   f"dLegerPeers ({', '.join(self.peers)})")

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "peers")

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "DLedgerConfig":
        """The DLedger keys of broker.conf-style string values (others are ignored here)."""
        from broker.store.config import _convert
        known = {f.name: f for f in dataclasses.fields(cls) if f.name != "peers"}
        return cls(**{k: _convert(k, v, known[k].type) for k, v in props.items() if k in known})
