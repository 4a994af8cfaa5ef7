"""ProxyConfig: the gRPC front's settings, with RocketMQ 5's ProxyConfig keys and defaults.

RocketMQ reads them from rmq-proxy.json; `broker proxy -c proxy.conf` reads the same keys from a
properties file, like every other config of this project. A bad value refuses to start, naming
the key; a key not read here is logged.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from broker.proxy.tls import check_tls
from broker.server.broker_config import parse_delay_levels, renamed_tls_keys
from broker.store.errors import StoreConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class ProxyConfig:
    namesrvAddr: str = "127.0.0.1:9876"
    grpcServerPort: int = 8081
    bindAddress: str = "0.0.0.0"  # not a ProxyConfig key (the Java proxy binds every address)
    maxMessageSize: int = 4 * 1024 * 1024  # body limit; 0 or less: none
    maxUserPropertySize: int = 16 * 1024
    userPropertyMaxNum: int = 128
    maxMessageGroupSize: int = 64
    maxDelayTimeMills: int = 24 * 3600 * 1000
    maxTransactionRecoverySecond: int = 3600
    grpcShutdownTimeSeconds: int = 30
    # a PushConsumer's messages (auto_renew): popped for defaultInvisibleTimeMills, and renewed by
    # renewSliceTimeMillis renewAheadTimeMillis before that ends (broker.proxy.receipt_handle_manager)
    defaultInvisibleTimeMills: int = 60_000
    renewAheadTimeMillis: int = 10_000
    renewSliceTimeMillis: int = 60_000
    # the longest a receive is held waiting for messages, and what the settings reply tells
    # consumers to poll for: a Java 5.x PushConsumer's shutdown waits for its receive in flight
    grpcClientConsumerMaxLongPollingTimeoutMillis: int = 20_000
    # not a ProxyConfig key: µs a request to a broker waits, while others are in flight, for the
    # next ones to share its write (broker.client.channel.ClientChannel.coalesce_delay). 0 (off):
    # 2000 cut the front's CPU per send by ~20 % at 64 sends in flight, but added ~0.7 ms to the
    # median at 8 in flight, and holds every send while a consumer long-polls (docs/grpc-front.md)
    remotingCoalesceMicros: int = 0
    # a 5.x delivery timestamp goes to the broker as TIMER_DELIVER_MS, kept by its timer wheel to the
    # precision (the Java proxy's default); useDelayLevel=true carries it as the first of the
    # broker's delay levels (messageDelayLevel) not shorter than the wait instead, for a broker
    # with timerWheelEnable=false
    useDelayLevel: bool = False
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    # TLS (broker.proxy.tls): tls.server.mode is TlsSystemConfig's, the three others ProxyConfig's
    tlsMode: str = "disabled"
    tlsTestModeEnable: bool = True
    tlsKeyPath: str = ""
    tlsCertPath: str = ""
    # tls.enable: the front's own connections to the name servers and brokers speak TLS (a
    # broker whose remoting port enforces TLS needs it)
    tlsEnable: bool = False
    # not a ProxyConfig key: local mode's TLS to the name servers (its broker's tls.enable), apart
    # from the TLS to its broker (its broker's port enforcing it); None: as tlsEnable
    tlsNamesrv: bool | None = None
    # SendMessage checks a message's type against its topic's message.type attribute (broker.proxy.topic_types)
    enableTopicMessageTypeCheck: bool = True
    # the broker that started this front as its child (local mode): logged, nothing more
    parentBroker: str = ""
    # ACL (broker.proxy.grpc_acl): 5.x clients' signed calls checked against a plain_acl.yml, as
    # RocketMQ 5.1's proxy does with enableACL; aclFile (not a ProxyConfig key, the broker's) names
    # it, default plain_acl.yml beside proxy.conf, else $ROCKETMQ_HOME/conf/plain_acl.yml
    enableACL: bool = False
    aclFile: str = ""
    # brokers with aclEnable: sign the front's requests with tools.yml's account (broker.proxy.
    # inner_credentials); aclToolsFile (not a ProxyConfig key) names it, default beside proxy.conf
    enableAclRpcHookForClusterMode: bool = False
    aclToolsFile: str = ""
    # metrics (broker.proxy.proxy_metrics): ProxyConfig's keys; `broker proxy` serves /metrics on
    # metricsPromExporterHost (default bindAddress) : metricsPromExporterPort when PROM; the labels
    # of its rocketmq_proxy_up
    metricsExporterType: str = "DISABLE"
    metricsPromExporterPort: int = 5557
    metricsPromExporterHost: str = ""
    proxyClusterName: str = "DefaultCluster"
    proxyName: str = "DEFAULT_PROXY"

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> tuple["ProxyConfig", list[str]]:
        """(config, the keys it does not read)."""
        from broker.store.config import _convert
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        props = renamed_tls_keys(props)
        values = {k: _convert(k, v, types[k]) for k, v in props.items() if k in types}
        config = cls(**values)
        config.validate()
        return config, [k for k in props if k not in types]

    def validate(self) -> None:
        if not 0 < self.grpcServerPort < 65536:
            raise StoreConfigError("grpcServerPort", f"{self.grpcServerPort} is not a port")
        if not self.namesrvAddr.strip():
            raise StoreConfigError("namesrvAddr", "is empty: the front finds brokers through a name server")
        for key in ("maxMessageGroupSize", "userPropertyMaxNum", "maxUserPropertySize", "maxDelayTimeMills",
                    "defaultInvisibleTimeMills", "renewAheadTimeMillis", "renewSliceTimeMillis",
                    "grpcClientConsumerMaxLongPollingTimeoutMillis"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        if not 0 <= self.remotingCoalesceMicros <= 100_000:
            raise StoreConfigError("remotingCoalesceMicros", f"{self.remotingCoalesceMicros} is not 0..100000 µs")
        self.delay_levels_ms  # names messageDelayLevel when malformed
        if self.renewAheadTimeMillis >= self.defaultInvisibleTimeMills or \
                self.renewAheadTimeMillis >= self.renewSliceTimeMillis:
            raise StoreConfigError("renewAheadTimeMillis", f"{self.renewAheadTimeMillis} must be shorter than "
                                   "defaultInvisibleTimeMills and renewSliceTimeMillis (a renewal would come too late)")
        if self.enableACL:
            from broker.server.plain_access_validator import load_plain_acl
            if not self.aclFile:
                raise StoreConfigError("aclFile", "enableACL=true needs the plain_acl.yml to check clients against")
            try:
                load_plain_acl(self.aclFile)
            except StoreConfigError as e:
                raise StoreConfigError("enableACL", f"{self.aclFile}: {e}") from None
        if self.enableAclRpcHookForClusterMode:
            from broker.proxy.inner_credentials import load_tools_yml
            load_tools_yml(self.aclToolsFile)  # names the key when the file is missing or incomplete
        self.metricsExporterType = self.metricsExporterType.strip().upper()
        if self.metricsExporterType not in ("DISABLE", "PROM"):
            raise StoreConfigError("metricsExporterType", f"{self.metricsExporterType!r}: the front serves DISABLE or "
                                   "PROM (a broker in local mode serves its front's metrics with its own)")
        if not 0 < self.metricsPromExporterPort < 65536:
            raise StoreConfigError("metricsPromExporterPort", f"{self.metricsPromExporterPort} is not a port")
        check_tls(self)

    @functools.cached_property
    def delay_levels_ms(self) -> list[int]:  # parsed once, not per delayed message
        return parse_delay_levels(self.messageDelayLevel)


def load_proxy_config(path: str | None, overrides: dict[str, str] | None = None) -> tuple[ProxyConfig, list[str]]:
    from broker.conf import read_properties
    from broker.proxy.inner_credentials import default_tools_file
    from broker.server.plain_access_validator import default_acl_file
    props = read_properties(path) if path else {}
    props.update(overrides or {})
    props.setdefault("aclFile", default_acl_file(path))
    props.setdefault("aclToolsFile", default_tools_file(path))
    return ProxyConfig.from_properties(props)
