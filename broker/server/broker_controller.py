"""BrokerController: the store, the remoting server and the processors, registered with the name servers."""
from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from broker.remoting.controller_codes import GET_BROKER_EPOCH_CACHE, NOTIFY_BROKER_ROLE_CHANGED
from broker.remoting import codes
from broker.raft.config import DLedgerConfig
from broker.server.plain_access_validator import AclError, PlainAccessValidator
from broker.server.processor.admin_processor import AdminProcessor
from broker.server.broker_config import BrokerConfig
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import RemotingServer, connect
from broker.remoting.tls import client_context, server_context
from broker.server.client.consumer_manager import ConsumerManager
from broker.server.processor.consumer_processor import ConsumerProcessor
from broker.server.metrics.broker_metrics import BrokerMetrics
from broker.server.metrics.rpc_latency import ONEWAY, RpcLatency
from broker.server.longpolling.pull_hold import PullHoldService
from broker.server.pop.pop_service import PopService
from broker.server.client.producer_manager import ProducerManager
from broker.server.processor.pull_processor import PullMessageProcessor
from broker.server.processor.recall_message_processor import RecallMessageProcessor
from broker.server.processor.broker_config_processor import BrokerConfigProcessor
from broker.server.processor.connection_list_processor import ConnectionListProcessor
from broker.server.processor.reset_offset_processor import ResetOffsetProcessor
from broker.server.processor.stats_processor import StatsProcessor
from broker.server.processor.query_processor import QueryMessageProcessor
from broker.server.schedule.schedule_service import ScheduleMessageService
from broker.server.timer.timer_message_service import TimerMessageService
from broker.server.fast_failure import FastFailure
from broker.server.processor.send_fast_path import FastSendPath
from broker.server.metrics.broker_stats_manager import BrokerStatsManager
from broker.server.processor.reply_message_processor import ReplyMessageProcessor
from broker.server.processor.send_processor import SendMessageProcessor
from broker.server.slave.slave_synchronize import FIRST_DELAY, PERIOD, SlaveSynchronize
from broker.server.subscription.subscription_group_manager import SubscriptionGroupManager
from broker.server.processor.subscription_group_processor import SubscriptionGroupProcessor
from broker.remoting.refusals import response_code
from broker.server.topic.topic_manager import TopicManager
from broker.server.processor.end_transaction_processor import EndTransactionProcessor
from broker.server.transaction.transactional_message_bridge import TransactionalMessageBridge
from broker.server.transaction.transactional_message_check_service import TransactionalMessageCheckService
from broker.server.transaction.transactional_message_service import TransactionalMessageService
from broker.services.message_store import MessageStore
from broker.store.config import MessageStoreConfig
from broker.store.errors import StoreConfigError
from broker.store.subscription_group_table import SubscriptionGroupTable

log = logging.getLogger("broker")
MASTER_UNKNOWN_RETRY = 1.0  # s: a slave that learned no master registers again this soon


def dledger_follower_id(dledger: DLedgerConfig) -> int:
    """The brokerId a DLedger member registers with while it follows: RocketMQ's
    DLedgerCommitLog.getId, the number after the id's first letter plus 1 (n0 -> 1, n2 -> 3);
    for an id not of that form, its place in dLegerPeers plus 1."""
    sid = dledger.dLegerSelfId
    if sid[1:].isdigit():
        return int(sid[1:]) + 1
    return list(dledger.peers).index(sid) + 1


def _timed_done(latency: RpcLatency, cmd: RemotingCommand, f: asyncio.Future, t0: int, held: bool) -> None:
    if f.cancelled():
        latency.record(cmd.code, None, time.perf_counter_ns() - t0, held, "cancelled")
    elif f.exception() is not None:
        latency.record(cmd.code, None, time.perf_counter_ns() - t0, held, "process_request_failed")
    elif f.result() is not None:
        latency.record(cmd.code, f.result().code, time.perf_counter_ns() - t0, held)


async def _timed(latency: RpcLatency, cmd: RemotingCommand, coro, t0: int):
    held = cmd.code in _LONG_POLLING  # RocketMQ's is_long_polling: a pull or pop that may be held
    try:
        res = await coro
    except asyncio.CancelledError:
        latency.record(cmd.code, None, time.perf_counter_ns() - t0, held, "cancelled")
        raise
    except BaseException:
        latency.record(cmd.code, None, time.perf_counter_ns() - t0, held, "process_request_failed")
        raise
    if res is not None:
        latency.record(cmd.code, res.code, time.perf_counter_ns() - t0, held)
    return res


_LONG_POLLING = frozenset((codes.PULL_MESSAGE, codes.POP_MESSAGE))


class BrokerController:
    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig, host: str = "0.0.0.0",
                 dledger: DLedgerConfig | None = None):
        self.config = config
        self.store_config = store_config
        self.host = host
        self.dledger = dledger if store_config.enableDLegerCommitLog else None
        if store_config.enableDLegerCommitLog and dledger is None:
            raise StoreConfigError("enableDLegerCommitLog",
                                   "DLedger mode needs dLegerGroup, dLegerPeers and dLegerSelfId")
        if self.dledger is not None:
            # the role follows the DLedger member's (broker.raft.role_change_handler): a slave
            # with its follower id until this member leads and has caught up
            from broker.raft.dledger_message_store import DLedgerMessageStore
            self.store = DLedgerMessageStore(store_config, self.dledger)
            self.store.role_listeners.append(self._on_dledger_role)
            if config.brokerId != 0:
                log.warning("brokerId %d ignored in DLedger mode: the leader is 0, a follower %d", config.brokerId,
                            dledger_follower_id(self.dledger))
            config.brokerId = dledger_follower_id(self.dledger)
        else:
            self.store = MessageStore(store_config)
        self.topics: TopicManager | None = None
        self.groups: SubscriptionGroupManager | None = None
        self.consumers = ConsumerManager(config.channelExpiredTimeout / 1000)
        self.producers = ProducerManager(config.channelExpiredTimeout / 1000)
        self.transaction_check: TransactionalMessageCheckService | None = None
        self.consumer_processor: ConsumerProcessor | None = None
        self.holds = PullHoldService()
        self.server: RemotingServer | None = None
        self.acl: PlainAccessValidator | None = None
        self.schedule: ScheduleMessageService | None = None
        self.timer: TimerMessageService | None = None
        self.pop: PopService | None = None
        if config.aclEnable:  # before the store starts: a bad ACL file refuses to start, naming it
            self.acl = PlainAccessValidator(config.acl_file)
        self.handlers: dict = {}
        self._timers: list[asyncio.TimerHandle] = []
        self._register_task: asyncio.Task | None = None
        self._register_again = False
        self._master_retry: asyncio.TimerHandle | None = None  # _register_until_master_known
        self._namesrv_conns: dict = {}  # name server address -> RemotingConnection
        self.replicas = None
        self._switching = False
        if config.enableControllerMode:
            # the controller names the role and the id (broker.server.controller.replicas_manager)
            from broker.server.controller.replicas_manager import ReplicasManager
            self.replicas = ReplicasManager(self)
            self.replicas.prepare_store()
        self.slave_sync = (SlaveSynchronize(self) if store_config.is_slave or self.dledger or self.replicas
                           else None)
        self.metrics = BrokerMetrics(self)
        self.rpc_latency = RpcLatency()
        # local mode: the front in this process; a callable giving its connected 5.x clients
        # (broker.proxy.proxy_metrics.client_rows), set by whoever started it (broker.cli)
        self.front_metrics = None
        self.fast: FastSendPath | None = None
        self.fast_failure: FastFailure | None = None
        # as RocketMQ's BrokerStartup: a slave needs an id of its own, a master is always 0
        if self.dledger is not None or self.replicas is not None:
            pass
        elif store_config.is_slave and config.brokerId <= 0:
            raise StoreConfigError("brokerId", f"{config.brokerId}: a SLAVE's brokerId must be 1 or more")
        elif not store_config.is_slave and config.brokerId != 0:
            log.warning("brokerId %d ignored: a %s's id is 0", config.brokerId, store_config.brokerRole)
            config.brokerId = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving = False

    @property
    def addr(self) -> str:
        return f"{self.store_config.brokerIP1}:{self.server.port if self.server else self.store_config.listenPort}"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.store.start()
        try:
            self.topics = TopicManager(self.store.topic_config, self.config.autoCreateTopicEnable,
                                       self.config.defaultTopicQueueNums, self.config.brokerClusterName)
            self.topics.on_change.append(self.register_soon)
            # every topic whose queues the log holds is served, whatever topics.json lost (a
            # crash before its background write) or never had (a slave's master died first)
            self.topics.learn(self.store.queue_counts())
            if self.store_config.is_slave or self.dledger is not None or self.replicas is not None:
                self.store.on_new_queues.append(lambda: self.topics.learn(self.store.queue_counts()))
            self.schedule = ScheduleMessageService(self.store, self.topics, self.config.messageDelayLevel,
                                                   on_delivered=self.holds.notify)
            self.timer = TimerMessageService(self.store, self.topics, on_delivered=self.holds.notify)
            self.handlers.update(self.timer.handlers())
            group_table = SubscriptionGroupTable(self.store_config.config_dir)
            group_table.load()  # neither it nor its .bak parses: refuses to start, naming the file
            self.groups = groups = SubscriptionGroupManager(group_table, self.config.autoCreateSubscriptionGroup,
                                                            self.config.maxReconsumeTimes)
            store, topics, schedule, holds = self.store, self.topics, self.schedule, self.holds
            bridge = TransactionalMessageBridge(store, topics)
            transactions = TransactionalMessageService(bridge)
            self.transaction_check = TransactionalMessageCheckService(transactions, self.producers, self.config,
                                                                      self.store_config.fileReservedTime)
            self.consumer_processor = ConsumerProcessor(store, topics, self.consumers, holds, schedule,
                                                        self.config.maxReconsumeTimes, self.producers,
                                                        self.config.rebalanceLockMaxLiveTime / 1000, groups=groups,
                                                        property_filter=self.config.enablePropertyFilter)
            self.broker_stats = broker_stats = BrokerStatsManager(store, topics, self.config.brokerClusterName)
            self.metrics.bind(store, topics, self.consumers, broker_stats)
            sender = SendMessageProcessor(store, topics, schedule, holds, self.config.maxReconsumeTimes, bridge,
                                          self.config.rejectTransactionMessage, self.config.brokerClusterName,
                                          timer=self.timer, broker_name=self.config.brokerName)
            for proc in (sender, RecallMessageProcessor(sender, self.config, self.store_config),
                         ReplyMessageProcessor(store, holds, self.producers, sender, lambda: self.addr),
                         PullMessageProcessor(store, topics, self.consumers, holds, self.config, groups=groups,
                                              stats=broker_stats),
                         self.consumer_processor,
                         EndTransactionProcessor(store, topics, schedule, holds, transactions),
                         AdminProcessor(store, topics, schedule, self.metrics.runtime_table),
                         QueryMessageProcessor(store), SubscriptionGroupProcessor(groups),
                         StatsProcessor(store, topics, self.consumers, groups, self.config.brokerName, lambda: self.addr,
                                        broker_stats),
                         BrokerConfigProcessor(self.config, self.store_config, topics, groups),
                         ConnectionListProcessor(self.consumers, self.producers),
                         ResetOffsetProcessor(store, topics, self.consumers, self.config.brokerName)):
                self.handlers.update(proc.handlers())
            # pop is served by whichever broker takes writes (PopService refuses it elsewhere); a
            # DLedger leader or a controller-mode master starts it when its role says so
            self.pop = PopService(store, topics, holds, self.config, groups=groups)
            self.handlers.update(self.pop.handlers())
            if not store.is_slave and self.dledger is None and self.replicas is None:
                await self.pop.start()  # before serving: the pop offsets are recovered from the revive log
            self.fast_failure = FastFailure(self.config.brokerFastFailureEnable,
                                            self.store_config.osPageCacheBusyTimeOutMills)
            self.fast_failure.guard(self.handlers)
            self.fast = FastSendPath(store, topics, holds, self.acl is not None, self.config.brokerClusterName,
                                     latency=self.rpc_latency, timer=self.timer, broker_name=self.config.brokerName,
                                     fast_failure=self.fast_failure)
            topics.on_change.append(self.fast.sync_routes)
            if self.replicas is not None:
                self.handlers[GET_BROKER_EPOCH_CACHE] = self._epoch_cache
                self.handlers[NOTIFY_BROKER_ROLE_CHANGED] = self._role_notified
            # the VIP channel on listenPort - 2, as RocketMQ's broker (0 and 1 give an ephemeral one)
            cfg = self.config
            self.server = RemotingServer(self.handle, self.host, self.store_config.listenPort,
                                         idle_timeout=cfg.serverChannelMaxIdleTimeSeconds, fast=self.fast,
                                         fast_port=max(self.store_config.listenPort - 2, 0), tls_mode=cfg.tlsMode,
                                         ssl_context=server_context(cfg.tlsMode, cfg.tlsTestModeEnable,
                                                                    cfg.tlsCertPath, cfg.tlsKeyPath))
            self.server.on_close.append(self.consumer_processor.connection_closed)
            self.server.on_close.append(self.producers.connection_closed)
            await self.server.start()
            self.schedule.start(deliver=not self.store.is_slave)
            self.timer.start(deliver=not self.store.is_slave)
            self.transaction_check.set_checking(not self.store.is_slave)
            self.pop.set_serving(not self.store.is_slave)
            self._serving = True  # from here a DLedger role switch re-registers and moves deliveries
        except BaseException:
            await self.store.close()
            raise
        # debug: `broker serve` prints its own "broker ... listening on" line (see namesrv/server.py)
        log.debug("broker %s (%s) listening on %s:%d, name servers %s", self.config.brokerName,
                 self.config.brokerClusterName, self.host, self.server.port, self.config.namesrv_addrs or "none")
        if self.config.metricsExporterType == "PROM":
            self.metrics.start(self.config.metricsPromExporterHost or self.store_config.brokerIP1,
                               self.config.metricsPromExporterPort)
        if self.config.metricsExporterType == "OTLP_GRPC":
            self.metrics.start_otlp(self.config)
        if self.config.metricsPort and (self.config.metricsExporterType != "PROM"
                                        or self.config.metricsPort != self.config.metricsPromExporterPort):
            self.metrics.start(self.store_config.brokerIP1, self.config.metricsPort)
        if self.replicas is not None:
            self.replicas.start()
        self.register_soon()
        self._every(self.config.registerNameServerPeriod / 1000, self.register_soon)
        self._every(10.0, self.consumer_processor.scan_expired)
        self.metrics.sample()
        self._every(10.0, self.metrics.sample)
        self.broker_stats.sample()
        self._every(10.0, self.broker_stats.sample)
        self._every(10.0, self.producers.scan_expired)
        self._every(self.store_config.flushConsumerOffsetInterval / 1000, self.schedule.persist_soon)
        if self.acl is not None:
            self._every(5.0, self.acl.reload_if_changed)
        if self.slave_sync is not None:
            def sync():
                asyncio.ensure_future(self.slave_sync.sync_all())
            # A DLedger follower may be the master after the next election, with no master left
            # to copy from: it copies every flushConsumerOffsetInterval (5 s), the interval the
            # master itself persists offsets at, so a failover makes consumers re-read no more
            # than what they committed in that interval (RocketMQ's 10 s period would double it).
            # An ordinary slave keeps RocketMQ's 10 s: its master comes back with its own offsets.
            period = min(PERIOD, self.store_config.flushConsumerOffsetInterval / 1000) if self.dledger else PERIOD
            self._timers.append(self._loop.call_later(min(FIRST_DELAY, period), sync))
            self._every(period, sync)

    def _every(self, seconds: float, fn) -> None:
        def tick():
            fn()
            self._timers.append(self._loop.call_later(seconds, tick))
        self._timers.append(self._loop.call_later(seconds, tick))

    async def close(self) -> None:
        self._serving = False  # a DLedger role change while stopping must not register us again
        if self._master_retry is not None:
            self._master_retry.cancel()
            self._master_retry = None
        if self.replicas is not None:
            await self.replicas.close()
        for t in self._timers:
            t.cancel()
        self._timers.clear()
        if self._register_task is not None:
            self._register_task.cancel()
        await self.unregister()
        self.metrics.stop()
        if self.slave_sync is not None:
            self.slave_sync.close()
        self.holds.cancel_all()
        if self.server is not None:
            await self.server.close()
        if self.schedule is not None:
            await self.schedule.close()
        if self.timer is not None:
            await self.timer.close()
        if self.transaction_check is not None:
            await self.transaction_check.close()
        if self.pop is not None:
            await self.pop.close()
        await self.store.close()

    # -- requests --------------------------------------------------------------------------------
    def handle(self, cmd: RemotingCommand, conn):
        """A request's answer (broker.remoting.request_handling takes what this returns), timed
        into rocketmq_rpc_latency."""
        t0 = time.perf_counter_ns()
        res = self._handle(cmd, conn)
        latency = self.rpc_latency
        if res is None:
            if cmd.is_oneway:
                latency.record(cmd.code, None, time.perf_counter_ns() - t0, result=ONEWAY)
        elif type(res) is RemotingCommand:
            latency.record(cmd.code, res.code, time.perf_counter_ns() - t0)
        elif isinstance(res, asyncio.Future):
            res.add_done_callback(lambda f: _timed_done(latency, cmd, f, t0, False))
        else:  # a coroutine (a held pull, a pop, a call out): timed by a frame around it
            return _timed(latency, cmd, res, t0)
        return res

    def _handle(self, cmd: RemotingCommand, conn):
        if self._switching and cmd.code not in (NOTIFY_BROKER_ROLE_CHANGED, GET_BROKER_EPOCH_CACHE):
            # controller mode: the store restarts in its new role (half a second)
            return None if cmd.is_oneway else cmd.response(
                codes.SYSTEM_BUSY, remark="[SWITCHING] the broker is switching its role (controller mode); retry")
        fn = self.handlers.get(cmd.code)
        if fn is None:
            return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED, remark=f" request type {cmd.code} not supported")
        if self.acl is not None:
            try:
                self.acl.validate(cmd, conn.peer.rpartition(":")[0])
            except AclError as e:
                log.warning("ACL refused request code %d from %s: %s", cmd.code, conn.peer, e)
                return cmd.response(codes.NO_PERMISSION, remark=str(e))
        try:
            return fn(cmd, conn)
        except Exception as e:
            code = response_code(e)  # refusals and store errors, each with its code, mapped in one place
            if code is None:
                raise  # a bug: the connection logs it and answers "internal error"
            # the refusal's own words, as RocketMQ's remark (the log names the request code)
            return cmd.response(code, remark=str(e))

    # -- name servers ----------------------------------------------------------------------------
    def register_soon(self) -> None:
        """Register with every name server now (REGISTER_BROKER, 103), coalescing bursts."""
        if self._register_task is not None and not self._register_task.done():
            self._register_again = True
            return
        self._register_task = asyncio.ensure_future(self._register_all())

    async def _register_all(self) -> None:
        if self.replicas is not None and not self.replicas.routable():
            return  # controller mode: no role yet (or fenced, or a master cut off from the controller)
        while True:
            self._register_again = False
            body = msgspec.json.encode({"topicConfigSerializeWrapper": self.topics.serialize_wrapper(),
                                        "filterServerList": []})
            await asyncio.gather(*(self._register(addr, body) for addr in self.config.namesrv_addrs))
            if not self._register_again:
                self._register_until_master_known()
                return

    def _register_until_master_known(self) -> None:
        """A slave (or DLedger follower) learns its master only from a registration's answer; one
        answered before the master registered (a follower registering just before the election
        ended) would leave it without one until the next period (30 s), copying nothing from the
        master meanwhile. It registers again in a second until it knows the master."""
        if (self.slave_sync is None or self.replicas is not None or self.config.brokerId == 0
                or self.slave_sync.master_addr is not None or not self._serving
                or self._master_retry is not None):
            return

        def again():
            self._master_retry = None
            self.register_soon()
        self._master_retry = self._loop.call_later(MASTER_UNKNOWN_RETRY, again)

    def _header(self) -> dict:
        return {"brokerName": self.config.brokerName, "brokerAddr": self.addr,
                "clusterName": self.config.brokerClusterName, "brokerId": self.config.brokerId,
                "haServerAddr": f"{self.store_config.brokerIP1}:{self.store_config.ha_port}",
                "compressed": False}

    async def _namesrv_conn(self, addr: str, timeout: float):
        """The broker's one connection to a name server, kept open as RocketMQ keeps it: the
        name server drops the broker's routes the moment it closes (a crash, not 120 s later)."""
        conn = self._namesrv_conns.get(addr)
        if conn is None or conn.transport is None:
            host, _, port = addr.rpartition(":")
            conn = self._namesrv_conns[addr] = await asyncio.wait_for(
                connect(host, int(port), ssl_context=client_context() if self.config.tlsEnable else None), timeout)
        return conn

    async def _register(self, addr: str, body: bytes) -> None:
        try:
            conn = await self._namesrv_conn(addr, 3)
            r = await conn.request(RemotingCommand.request(codes.REGISTER_BROKER, self._header(), body), 3)
            if r.code != codes.SUCCESS:
                log.warning("name server %s refused the registration: %d %s", addr, r.code, r.remark)
            elif self.slave_sync is not None:
                self._learn_master(r.ext.get("masterAddr"), r.ext.get("haServerAddr"))
        except (OSError, asyncio.TimeoutError) as e:
            self._drop_namesrv_conn(addr)
            log.warning("could not register with name server %s: %s", addr, e or type(e).__name__)

    def _drop_namesrv_conn(self, addr: str) -> None:
        conn = self._namesrv_conns.pop(addr, None)
        if conn is not None:
            conn.close()

    def _learn_master(self, master_addr: str | None, ha_addr: str | None) -> None:
        """A slave's registration answer names its master (RocketMQ's RegisterBrokerResult)."""
        if self.replicas is not None:
            return  # controller mode: the controller names the master, its epoch cache the HA address
        if self.dledger is not None and not self.store.is_slave:
            return  # answered to our registration as a follower, read once we lead
        if master_addr and master_addr != self.slave_sync.master_addr:
            log.info("master is %s (HA %s)", master_addr, ha_addr or "unknown")
            self.slave_sync.master_addr = master_addr
        if self.dledger is not None:
            return  # no HA link: DLedger replicates
        if ha_addr and not self.store_config.haMasterAddress:
            self.store.set_master_ha_address(ha_addr)

    def _on_dledger_role(self, master: bool) -> None:
        """DLedgerRoleChangeHandler switched this broker (RocketMQ's changeToMaster /
        changeToSlave): its id, the schedule's deliveries, the transaction checks and pop's revive,
        the slave's synchronization, and a
        registration with every name server now, so clients' routes move at once."""
        self.config.brokerId = 0 if master else dledger_follower_id(self.dledger)
        if self.slave_sync is not None:
            self.slave_sync.master_addr = None  # a follower learns the new master from its registration
            self.slave_sync.close()
        log.info("DLedger role: %s, registering as brokerId %d", "master" if master else "slave",
                 self.config.brokerId)
        if self._serving:  # before that, start() delivers as the role says and registers once it listens
            self.schedule.set_delivering(master)
            if master:
                self.timer.set_delivering(True)
            else:
                self.timer.follow()  # a follower builds the wheel it may take over
            self.transaction_check.set_checking(master)
            self.pop.set_serving(master)
            self.register_soon()

    # -- controller mode ---------------------------------------------------------------------------
    def _epoch_cache(self, cmd: RemotingCommand, conn):
        body, ha_addr = self.replicas.epoch_cache()
        return cmd.response(codes.SUCCESS, {"haServerAddr": ha_addr} if ha_addr else {},
                            body=msgspec.json.encode(body))

    def _role_notified(self, cmd: RemotingCommand, conn):
        self.replicas.notified(cmd)
        return None if cmd.is_oneway else cmd.response(codes.SUCCESS)

    def pause_for_switch(self) -> None:
        """The store is about to restart in another role: requests are answered SYSTEM_BUSY (clients
        retry), held pulls are answered now, deliveries stop."""
        self._switching = True
        self.holds.notify_all()
        if self.schedule is not None:
            self.schedule.set_delivering(False)
        if self.timer is not None:
            self.timer.set_delivering(False)
        if self.transaction_check is not None:
            self.transaction_check.set_checking(False)
        if self.pop is not None:
            self.pop.set_serving(False)
        if self.slave_sync is not None:
            self.slave_sync.master_addr = None
            self.slave_sync.close()

    def resume_after_switch(self, role: str | None, master_addr: str) -> None:
        """The store serves in its new role: the send kernel writes through the new log, the
        schedule delivers on a master, a slave copies offsets from its master, and the name
        servers hear of it at once (master: brokerId 0, slave: its own id)."""
        if self.fast is not None:
            self.fast.rebind(self.store)
        self.topics.learn(self.store.queue_counts())
        if self.schedule is not None:
            self.schedule.set_delivering(role == "master")
        if self.timer is not None:
            if role == "slave":
                self.timer.follow()
            else:
                self.timer.set_delivering(role == "master")
        if self.transaction_check is not None:
            self.transaction_check.set_checking(role == "master")
        if self.pop is not None:
            self.pop.set_serving(role == "master")
        self.config.brokerId = 0 if role == "master" else (self.replicas.broker_id or 0)
        if self.slave_sync is not None and role == "slave":
            self.slave_sync.master_addr = master_addr
        self._switching = False
        if self._serving:
            self.register_soon()

    async def unregister(self) -> None:
        async def one(addr: str) -> None:
            try:
                conn = await self._namesrv_conn(addr, 2)
                await conn.request(RemotingCommand.request(codes.UNREGISTER_BROKER, self._header()), 2)
            except (OSError, asyncio.TimeoutError):
                pass
            finally:
                self._drop_namesrv_conn(addr)
        if self.server is not None:
            await asyncio.gather(*(one(a) for a in self.config.namesrv_addrs))
