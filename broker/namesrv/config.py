"""NamesrvConfig: the name server's settings, from `broker namesrv`'s flags and an optional
namesrv.conf with RocketMQ 5's keys.

RocketMQ's NamesrvStartup reads one properties file into NamesrvConfig, NettyServerConfig and,
with enableControllerInNamesrv=true, ControllerConfig. So does load_namesrv_config: the name
server's keys here, the controller's through ControllerConfig.from_properties (the same reader as
`broker controller`'s controller.conf). A key neither reads is logged, never silently dropped; a
bad value refuses to start, naming the key.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from broker.controller.config import ControllerConfig
from broker.namesrv.route_info import BROKER_EXPIRED_SECONDS
from broker.store.errors import StoreConfigError

log = logging.getLogger("namesrv")

WILDCARDS = ("", "0.0.0.0", "::")


@dataclass
class NamesrvConfig:
    host: str = "127.0.0.1"  # bindAddress (RocketMQ binds 0.0.0.0; we stay on loopback unless told)
    port: int = 9876  # listenPort
    autoCreateTopicEnable: bool = True  # answer routes for topics brokers will create on first send
    defaultTopicQueueNums: int = 4
    scanNotActiveBrokerInterval: float = 10.0  # seconds here; namesrv.conf gives milliseconds, as RocketMQ
    brokerExpiredSeconds: float = BROKER_EXPIRED_SECONDS
    enableControllerInNamesrv: bool = False
    # TLS of its port (broker.remoting.tls), TlsSystemConfig's names
    tlsMode: str = "disabled"
    tlsTestModeEnable: bool = True
    tlsKeyPath: str = ""
    tlsCertPath: str = ""

    # namesrv.conf key -> (field, type). listenPort and bindAddress are NettyServerConfig's;
    # autoCreateTopicEnable and defaultTopicQueueNums are this name server's own (RocketMQ's
    # brokers answer unknown topics; ours also routes them: see RouteInfoManager).
    KEYS = {
        "listenPort": ("port", int),
        "bindAddress": ("host", str),
        "scanNotActiveBrokerInterval": ("scanNotActiveBrokerInterval", int),
        "enableControllerInNamesrv": ("enableControllerInNamesrv", bool),
        "autoCreateTopicEnable": ("autoCreateTopicEnable", bool),
        "defaultTopicQueueNums": ("defaultTopicQueueNums", int),
        "tls.server.mode": ("tlsMode", str),
        "tls.test.mode.enable": ("tlsTestModeEnable", bool),
        "tls.server.keyPath": ("tlsKeyPath", str),
        "tls.server.certPath": ("tlsCertPath", str),
    }

    def properties_text(self) -> str:
        """The keys RocketMQ names, as GET_NAMESRV_CONFIG answers them (intervals in milliseconds)."""
        lines = []
        for key, (field, typ) in self.KEYS.items():
            if key.startswith("tls."):
                continue  # TlsSystemConfig's: RocketMQ's name server answers them in no config
            v = getattr(self, field)
            if key == "scanNotActiveBrokerInterval":
                v = int(v * 1000)
            lines.append(f"{key}={str(v).lower() if typ is bool else v}\n")
        return "".join(lines)

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> tuple["NamesrvConfig", list[str]]:
        """(config, the keys it does not read)."""
        from broker.store.config import _convert
        values = {key: _convert(key, raw, cls.KEYS[key][1]) for key, raw in props.items() if key in cls.KEYS}
        if not 0 <= values.get("listenPort", 0) < 65536:
            raise StoreConfigError("listenPort", f"{values['listenPort']} is not a port")
        if "bindAddress" in values and not values["bindAddress"]:
            raise StoreConfigError("bindAddress", "is empty (0.0.0.0 listens on every address)")
        for key in ("scanNotActiveBrokerInterval", "defaultTopicQueueNums"):
            if values.get(key, 1) <= 0:
                raise StoreConfigError(key, f"{values[key]} must be positive")
        if "scanNotActiveBrokerInterval" in values:
            values["scanNotActiveBrokerInterval"] /= 1000
        if "tls.server.mode" in values:
            from broker.remoting.tls import check_mode
            values["tls.server.mode"] = check_mode(values["tls.server.mode"].strip().lower())
        config = cls(**{cls.KEYS[key][0]: v for key, v in values.items()})
        return config, [k for k in props if k not in cls.KEYS]


def load_namesrv_config(path: str | None, overrides: dict[str, str] | None = None
                        ) -> tuple[NamesrvConfig, ControllerConfig | None]:
    """The name server's config and, with enableControllerInNamesrv=true, its controller's (None
    otherwise). `overrides` (the command line's flags) win over the file."""
    from broker.conf import read_properties
    props = read_properties(path) if path else {}
    props.update(overrides or {})
    config, rest = NamesrvConfig.from_properties(props)
    controller_keys = ControllerConfig.property_keys()
    controller = None
    if config.enableControllerInNamesrv:
        # the controller's own checks name a missing or bad key (controllerDLegerPeers, ...)
        controller, _ = ControllerConfig.from_properties(props)
        _check_ports(config, controller)
    else:
        for key in (k for k in rest if k in controller_keys):
            log.warning("%s: a controller key in %s, ignored: enableControllerInNamesrv is not true", key, path)
    for key in (k for k in rest if k not in controller_keys):
        log.warning("%s: unknown key in %s, ignored", key, path)
    return config, controller


def _check_ports(config: NamesrvConfig, controller: ControllerConfig) -> None:
    """The controller listens on its own peer address (RocketMQ's DLedger controller's remoting
    port), never on the name server's: said here rather than as a bind error."""
    peer = controller.dledger.self_peer
    same_host = peer.host == config.host or peer.host in WILDCARDS or config.host in WILDCARDS
    if config.port and peer.port == config.port and same_host:
        raise StoreConfigError("controllerDLegerPeers", f"{controller.controllerDLegerSelfId}'s address "
                               f"{peer.addr} is the name server's listen address {config.host}:{config.port}: "
                               "the controller needs a port of its own")
