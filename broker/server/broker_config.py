"""BrokerConfig: the broker.conf keys the broker daemon reads (RocketMQ's BrokerConfig names).

The store's keys live in MessageStoreConfig; `load_broker_config` splits one broker.conf between
the two, refuses a bad value naming its key, and warns about keys neither knows.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

from broker.raft.config import DLedgerConfig
from broker.server.plain_access_validator import default_acl_file
from broker.store.config import MessageStoreConfig, _convert
from broker.store.delay_levels import parse_delay_levels  # noqa: F401 (where the broker's modules find it)
from broker.store.errors import StoreConfigError

log = logging.getLogger("conf")

# TlsSystemConfig's names (the Java broker's and proxy's -D properties, tls.config.file) of the TLS
# settings of the remoting port and the gRPC front, read in broker.conf and proxy.conf beside the
# proxy's own names (broker.remoting.tls, broker.proxy.tls)
TLS_SYSTEM_CONFIG_KEYS = {"tls.server.mode": "tlsMode", "tls.test.mode.enable": "tlsTestModeEnable",
                          "tls.server.keyPath": "tlsKeyPath", "tls.server.certPath": "tlsCertPath",
                          "tls.enable": "tlsEnable"}


def renamed_tls_keys(props: dict[str, str]) -> dict[str, str]:
    """`props` with TlsSystemConfig's names under the fields' names; both names given differently:
    refused naming the TlsSystemConfig one."""
    out = dict(props)
    for java, ours in TLS_SYSTEM_CONFIG_KEYS.items():
        if java in out:
            value = out.pop(java)
            if ours in out and out[ours].strip() != value.strip():
                raise StoreConfigError(java, f"{value!r} differs from {ours}={out[ours]!r}: one setting, two names")
            out[ours] = value
    return out


@dataclass
class BrokerConfig:
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = 0
    namesrvAddr: str = ""  # "host:port;host:port"; empty = NAMESRV_ADDR from the environment
    autoCreateTopicEnable: bool = True
    # a consumer group unknown to subscriptionGroup.json is created on first use (pull, pop, send-back)
    autoCreateSubscriptionGroup: bool = True
    defaultTopicQueueNums: int = 4
    aclEnable: bool = False
    # plain_acl.yml; empty = $ROCKETMQ_HOME/conf/plain_acl.yml, else the one beside broker.conf
    aclFile: str = ""
    registerNameServerPeriod: int = 30_000
    longPollingEnable: bool = True
    # cap on a pull's suspendTimeoutMillis: stay under the clients' 30 s pull RPC timeout
    brokerSuspendMaxTimeMillis: int = 15_000
    maxReconsumeTimes: int = 16  # a subscription group's retryMaxTimes
    messageDelayLevel: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    channelExpiredTimeout: int = 120_000  # a client silent this long leaves its groups
    # ms an orderly consumer's queue lock lasts after its last renewal (Java's system property
    # rocketmq.broker.rebalance.lockMaxLiveTime): a killed consumer's queues wait this long
    rebalanceLockMaxLiveTime: int = 60_000
    metricsPort: int = 0  # Prometheus /metrics on brokerIP1:metricsPort; 0 = off
    # RocketMQ 5.1's keys for the same endpoint: metricsExporterType=PROM serves /metrics on
    # metricsPromExporterHost (default brokerIP1) : metricsPromExporterPort
    metricsExporterType: str = "DISABLE"
    metricsPromExporterPort: int = 5557
    metricsPromExporterHost: str = ""
    # metricsExporterType=OTLP_GRPC (broker.server.metrics.otlp_exporter): the collector, "host:port"
    # (TLS) or "http://host:port"; "k:v,k:v" gRPC headers; timeout and interval of each push; and
    # "k:v,k:v" labels added to every point (metricsLabel, which /metrics does not add)
    metricsGrpcExporterTarget: str = ""
    metricsGrpcExporterHeader: str = ""
    metricGrpcExporterTimeOutInMills: int = 3_000
    metricGrpcExporterIntervalInMills: int = 60_000
    metricsLabel: str = ""
    # NettyServerConfig's: a client connection with no read and no write for this long is closed
    # (clients heartbeat every 30 s, so only dead or idle hostile peers are); 0 = never
    serverChannelMaxIdleTimeSeconds: int = 120
    # controller mode (RocketMQ 5): the controller assigns brokerId and the role (broker.remoting.
    # replicas_manager); controllerAddr lists the controllers' addresses, "host:port;host:port"
    enableControllerMode: bool = False
    controllerAddr: str = ""
    syncBrokerMetadataPeriod: int = 5_000  # ms: ask the controller for the group's state
    checkSyncStateSetPeriod: int = 5_000  # ms: the master reviews its SyncStateSet
    brokerHeartbeatInterval: int = 1_000  # ms
    controllerHeartBeatTimeoutMills: int = 10_000  # ms: the controller's verdict on a silent broker
    brokerElectionPriority: int = 2**31 - 1  # lower is preferred among equal candidates
    # the HA address a master tells its slaves to connect to, when they reach it through a NAT or
    # a proxy (not a RocketMQ key); "" = brokerIP1:haListenPort
    haAnnounceAddress: str = ""
    # transactional messages (broker.server.transaction): a half message still undecided
    # transactionTimeOut ms after its birth is checked with a producer of its group, once every
    # transactionCheckInterval ms, at most transactionCheckMax times, then discarded
    transactionTimeOut: int = 6_000
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 60_000
    rejectTransactionMessage: bool = False  # half messages refused NO_PERMISSION
    # consumers filtering by SQL92 over message properties (broker.server.filter.sql92). RocketMQ's
    # default, false, refuses an SQL92 subscription as RocketMQ does (expression_type)
    enablePropertyFilter: bool = False
    # RECALL_MESSAGE (a timer message taken back before its time): off unless enabled, as in RocketMQ
    recallMessageEnable: bool = False
    # pop consumption (broker.server.pop): queues of rmq_sys_REVIVE_LOG_<brokerClusterName>
    reviveQueueNum: int = 8
    # the gRPC front for 5.x clients (broker.proxy) started as this broker's supervised child on
    # this port (RocketMQ 5's local mode; the key is ProxyConfig's); 0 = none
    grpcServerPort: int = 0
    # TLS of the remoting port (and its VIP twin) and of the gRPC front (broker.remoting.tls,
    # broker.proxy.tls); tlsEnable (tls.enable): this broker's own connections to the name servers
    # speak TLS, as a RocketMQ client with tls.enable does
    tlsMode: str = "disabled"  # tls.server.mode
    tlsTestModeEnable: bool = True
    tlsKeyPath: str = ""
    tlsCertPath: str = ""
    tlsEnable: bool = False
    # BrokerFastFailure: sends that piled up while an append held the event loop longer than
    # osPageCacheBusyTimeOutMills are answered SYSTEM_BUSY (broker.server.fast_failure); false: none
    brokerFastFailureEnable: bool = True

    def __post_init__(self) -> None:
        from broker.remoting.tls import check_mode
        self.tlsMode = check_mode(self.tlsMode.strip().lower())
        if not 0 <= self.metricsPort < 65536:
            raise StoreConfigError("metricsPort", f"{self.metricsPort} is not a port (0 = off)")
        self.metricsExporterType = self.metricsExporterType.strip().upper()
        if self.metricsExporterType == "LOG":
            raise StoreConfigError("metricsExporterType", f"{self.metricsExporterType} is not served by this broker: "
                                   "PROM (Prometheus /metrics) and OTLP_GRPC are, or DISABLE")
        if self.metricsExporterType == "OTLP_GRPC" and not self.metricsGrpcExporterTarget.strip():
            raise StoreConfigError("metricsGrpcExporterTarget", "metricsExporterType=OTLP_GRPC needs the collector's "
                                   "address (host:port, or http://host:port without TLS)")
        for key in ("metricGrpcExporterTimeOutInMills", "metricGrpcExporterIntervalInMills"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} is not a positive number of milliseconds")
        if self.metricsExporterType not in ("DISABLE", "PROM", "OTLP_GRPC"):
            raise StoreConfigError("metricsExporterType", f"{self.metricsExporterType!r} is not one of DISABLE, PROM, "
                                   "OTLP_GRPC, LOG")
        if not 0 <= self.metricsPromExporterPort < 65536:
            raise StoreConfigError("metricsPromExporterPort", f"{self.metricsPromExporterPort} is not a port")
        if not 0 <= self.grpcServerPort < 65536:
            raise StoreConfigError("grpcServerPort", f"{self.grpcServerPort} is not a port (0 = no gRPC front)")
        if self.grpcServerPort and not self.namesrv_addrs:
            raise StoreConfigError("grpcServerPort", "the gRPC front finds brokers through the name server: "
                                   "namesrvAddr must be set too")
        if not 0 <= self.serverChannelMaxIdleTimeSeconds:
            raise StoreConfigError("serverChannelMaxIdleTimeSeconds",
                                   f"{self.serverChannelMaxIdleTimeSeconds} must not be negative (0 = never)")
        if not 0 <= self.brokerId:
            raise StoreConfigError("brokerId", f"{self.brokerId} must not be negative")
        if not 0 < self.defaultTopicQueueNums <= 1024:
            raise StoreConfigError("defaultTopicQueueNums", f"{self.defaultTopicQueueNums} must be 1..1024")
        for key in ("registerNameServerPeriod", "brokerSuspendMaxTimeMillis", "channelExpiredTimeout",
                    "transactionTimeOut", "transactionCheckMax", "transactionCheckInterval",
                    "rebalanceLockMaxLiveTime", "reviveQueueNum"):
            if getattr(self, key) <= 0:
                raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        for addr in self.namesrv_addrs:
            host, _, port = addr.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise StoreConfigError("namesrvAddr", f"{addr!r} is not host:port")
        parse_delay_levels(self.messageDelayLevel)  # names the key when a level is malformed
        if self.enableControllerMode:
            addrs = [a.strip() for a in self.controllerAddr.split(";") if a.strip()]
            if not addrs:
                raise StoreConfigError("controllerAddr", "must list the controllers (host:port;host:port) when "
                                       "enableControllerMode is true")
            for addr in addrs:
                host, _, port = addr.rpartition(":")
                if not host or not port.isdigit() or not 0 < int(port) < 65536:
                    raise StoreConfigError("controllerAddr", f"{addr!r} is not host:port")
            if self.haAnnounceAddress:
                host, _, port = self.haAnnounceAddress.rpartition(":")
                if not host or not port.isdigit() or not 0 < int(port) < 65536:
                    raise StoreConfigError("haAnnounceAddress", f"{self.haAnnounceAddress!r} is not host:port")
            for key in ("syncBrokerMetadataPeriod", "checkSyncStateSetPeriod", "brokerHeartbeatInterval",
                        "controllerHeartBeatTimeoutMills"):
                if getattr(self, key) <= 0:
                    raise StoreConfigError(key, f"{getattr(self, key)} must be positive")
        if not self.brokerName or "%" in self.brokerName:
            raise StoreConfigError("brokerName", f"{self.brokerName!r} is not a broker name")

    @property
    def acl_file(self) -> str:
        return self.aclFile or default_acl_file(None)

    @property
    def namesrv_addrs(self) -> list[str]:
        raw = self.namesrvAddr or os.environ.get("NAMESRV_ADDR", "")
        return [a.strip() for a in raw.split(";") if a.strip()]


def load_broker_config(props: dict[str, str]) -> tuple[BrokerConfig, MessageStoreConfig, list[str]]:
    """Split broker.conf properties; returns both configs and the keys neither knows.

    DLedger mode's keys are read and checked here (a bad dLegerPeers is refused naming it); the
    whole DLedgerConfig is `load_dledger_config`'s, and the store config carries the two keys its
    service processes need (the mode and the member's id)."""
    props = renamed_tls_keys(_grpc_port_alias(props))
    broker_fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    dledger_keys = set(DLedgerConfig.keys())
    dledger = load_dledger_config(props)
    mine = {k: _convert(k, v, broker_fields[k].type) for k, v in props.items() if k in broker_fields}
    store, unknown = MessageStoreConfig.from_properties(
        {k: v for k, v in props.items() if k not in broker_fields and k not in dledger_keys})
    store.enableDLegerCommitLog = dledger.enableDLegerCommitLog
    store.dLegerSelfId = dledger.dLegerSelfId
    broker = BrokerConfig(**mine)
    store.enableControllerMode = broker.enableControllerMode
    store.messageDelayLevel = broker.messageDelayLevel
    if broker.enableControllerMode and dledger.enableDLegerCommitLog:
        raise StoreConfigError("enableControllerMode", "controller mode and DLedger mode (enableDLegerCommitLog) "
                               "are two answers to the same question; choose one")
    return broker, store, unknown


def _grpc_port_alias(props: dict[str, str]) -> dict[str, str]:
    """`grpcListenPort` is read as `grpcServerPort`, the key RocketMQ 5's ProxyConfig names the
    port with: operators write either, and two different values are refused rather than one
    silently winning."""
    if "grpcListenPort" not in props:
        return props
    props = dict(props)
    alias = props.pop("grpcListenPort")
    if props.get("grpcServerPort", alias).strip() != alias.strip():
        raise StoreConfigError("grpcListenPort", f"{alias} differs from grpcServerPort={props['grpcServerPort']}; "
                               "both name the gRPC front's port: keep one")
    props["grpcServerPort"] = alias
    return props


def load_dledger_config(props: dict[str, str]) -> DLedgerConfig:
    """The DLedger keys of broker.conf (StoreConfigError naming a bad one)."""
    dledger_keys = set(DLedgerConfig.keys())
    return DLedgerConfig.from_properties({k: v for k, v in props.items() if k in dledger_keys})
