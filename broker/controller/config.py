"""ControllerConfig: the keys of a controller.conf, with RocketMQ 5's names and defaults
(common/ControllerConfig.java).

A controller is one member of a Raft group (DLedger): `controllerDLegerGroup`,
`controllerDLegerPeers` (`n0-host:port;n1-host:port;…`) and `controllerDLegerSelfId` name the
group and this member. As in RocketMQ (DLedgerController hands its requests to the DLedger
server's remoting server), the controller answers brokers and admin tools on its own peer
address: a broker's `controllerAddr` lists the controllers' peer addresses. RocketMQ's
ControllerStartup also sets a listenPort of 19876 which DLedger overrides; we have no second port.

The Raft timings are read under DLedger's own names (heartBeatTimeIntervalMs, …), as broker.conf
does in DLedger mode, so a test or an operator can shorten a failover without a code change.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from broker.raft.config import MIN_PEERS, DLedgerConfig, parse_peers
from broker.store.errors import StoreConfigError

DLEDGER_CONTROLLER = "DLedger"
# the broker's default heartbeat timeout (BrokerConfig.controllerHeartBeatTimeoutMills), used when
# a heartbeat does not carry its own
DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000


@dataclass
class ControllerConfig:
    controllerType: str = DLEDGER_CONTROLLER
    controllerDLegerGroup: str = ""
    controllerDLegerPeers: str = ""
    controllerDLegerSelfId: str = ""
    controllerStorePath: str = ""  # "" -> ~/DLedgerController, as RocketMQ's getter
    mappedFileSize: int = 1024 * 1024 * 1024  # DLedger's data file size for the controller's log
    scanNotActiveBrokerInterval: int = 5_000  # ms
    scanInactiveMasterInterval: int = 5_000  # ms
    enableElectUncleanMaster: bool = False
    notifyBrokerRoleChanged: bool = True  # read; the broker side that listens is not built yet
    electMasterMaxRetryCount: int = 3
    # the Raft member's config, built from the three controllerDLeger* keys and the timings
    dledger: DLedgerConfig | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.controllerType != DLEDGER_CONTROLLER:
            raise StoreConfigError("controllerType", f"{self.controllerType!r}: only {DLEDGER_CONTROLLER!r} is "
                                   "supported (RocketMQ's jRaft controller is not built)")
        if not self.controllerDLegerGroup:
            raise StoreConfigError("controllerDLegerGroup", "must be set (the controllers' Raft group name)")
        if not self.controllerDLegerPeers.strip():
            raise StoreConfigError("controllerDLegerPeers", "must be set (every controller's id-host:port: "
                                   "n0-host:port;n1-host:port;n2-host:port)")
        if not self.controllerDLegerSelfId:
            raise StoreConfigError("controllerDLegerSelfId", "must be set (this controller's id in "
                                   "controllerDLegerPeers)")
        peers = parse_peers(self.controllerDLegerPeers, "controllerDLegerPeers")
        if len(peers) < MIN_PEERS:
            raise StoreConfigError("controllerDLegerPeers", f"{len(peers)} peer(s): a controller group needs at least "
                                   f"{MIN_PEERS}, or one death leaves no majority to elect a leader")
        if self.controllerDLegerSelfId not in peers:
            raise StoreConfigError("controllerDLegerSelfId", f"{self.controllerDLegerSelfId!r} is not one of the ids "
                                   f"in controllerDLegerPeers ({', '.join(peers)})")
        for key in ("scanNotActiveBrokerInterval", "scanInactiveMasterInterval", "electMasterMaxRetryCount"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        if not 56 <= self.mappedFileSize <= 2**31 - 1:
            raise StoreConfigError("mappedFileSize", f"{self.mappedFileSize} is not between 56 and 2^31 - 1")
        if not self.controllerStorePath:
            self.controllerStorePath = os.path.join(os.path.expanduser("~"), f"{self.controllerType}Controller")

    @property
    def self_addr(self) -> str:
        assert self.dledger is not None
        return self.dledger.self_peer.addr

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "dledger")

    @staticmethod
    def raft_keys() -> frozenset[str]:
        """The DLedger timing keys a controller.conf may set (the group, peers and self id come
        from the controllerDLeger* keys)."""
        return frozenset(DLedgerConfig.keys()) - {"enableDLegerCommitLog", "dLegerGroup", "dLegerPeers",
                                                   "dLegerSelfId", "preferredLeaderId"}

    @classmethod
    def property_keys(cls) -> frozenset[str]:
        """Every key from_properties reads (a name server with the controller inside tells its own
        keys from these)."""
        return frozenset(cls.keys()) | cls.raft_keys()

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> tuple["ControllerConfig", list[str]]:
        """(config, unknown keys) from controller.conf's string values; the DLedger timing keys
        go to the Raft member's DLedgerConfig."""
        from broker.store.config import _convert
        known = {f.name: f for f in dataclasses.fields(cls) if f.name != "dledger"}
        raft_keys = cls.raft_keys()
        config = cls(**{k: _convert(k, v, known[k].type) for k, v in props.items() if k in known})
        timings = {k: _convert(k, v, DLedgerConfig.__dataclass_fields__[k].type)
                   for k, v in props.items() if k in raft_keys}
        config.dledger = DLedgerConfig(enableDLegerCommitLog=True, dLegerGroup=config.controllerDLegerGroup,
                                       dLegerPeers=config.controllerDLegerPeers,
                                       dLegerSelfId=config.controllerDLegerSelfId, **timings)
        unknown = [k for k in props if k not in known and k not in raft_keys]
        return config, unknown


def load_controller_config(path: str | None, overrides: dict[str, str] | None = None
                           ) -> tuple[ControllerConfig, list[str]]:
    from broker.conf import read_properties
    props = read_properties(path) if path else {}
    props.update(overrides or {})
    return ControllerConfig.from_properties(props)
