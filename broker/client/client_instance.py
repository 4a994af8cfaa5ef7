"""MQClientInstance: what the producers and consumers of one client share (RocketMQ's noun).

One connection (broker.client.channel.ClientChannel) per broker or name-server address, opened
on first use and again after it closed; topic routes from the name servers (each of "h:p;h:p" tried in turn) behind a RouteCache;
a heartbeat (HEART_BEAT, 34) naming every producer and consumer group to every broker of the
known routes, at start and every 30 s, which is how a broker learns who is in a consumer group.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from typing import Awaitable, Callable, Protocol

import msgspec

from broker.client.errors import BrokerUnreachable, ResponseError, RouteNotFound
from broker.client.message import MessageDecodeError, decode_messages
from broker.client.route import RouteCache, TopicRoute, parse_route
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.client.acl_hook import AclClientRPCHook, SessionCredentials
from broker.remoting.tls import client_context
from broker.client.channel import ClientChannel, open_channel, open_channel_in_process
from broker.kernels.client_codec import Reply

log = logging.getLogger("client")

HEARTBEAT_INTERVAL = 30.0
CONNECT_TIMEOUT = 3.0
NAMESRV_TIMEOUT = 3.0
_instances = itertools.count()


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def parse_namesrv_addr(namesrv_addr: str | None) -> list[str]:
    raw = namesrv_addr or os.environ.get("NAMESRV_ADDR", "") or "127.0.0.1:9876"
    return [a.strip() for a in raw.split(";") if a.strip()]


class ConsumerMember(Protocol):
    """What a consumer gives the instance: its heartbeat entry and a way to rebalance now."""
    group: str

    def consumer_data(self) -> dict: ...

    def rebalance_soon(self) -> None: ...


class MQClientInstance:
    def __init__(self, namesrv_addr: str | None = None, heartbeat_interval: float = HEARTBEAT_INTERVAL,
                 instance_name: str | None = None, credentials: SessionCredentials | None = None,
                 tls: bool | None = None, tls_namesrv: bool | None = None):
        self.namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        # tls.enable (the Java client's -Dtls.enable / setUseTLS): every connection, to name servers
        # and brokers, speaks TLS; None reads ROCKETMQ_TLS_ENABLE ("true"). A test-mode client
        # (the default, as RocketMQ's tls.test.mode.enable) trusts any certificate.
        # tls_namesrv (default: as tls) apart for the name servers: a broker's own gRPC front reaches
        # a TLS-only broker through plaintext name servers.
        if tls is None:
            tls = os.environ.get("ROCKETMQ_TLS_ENABLE", "").strip().lower() == "true"
        self.ssl_context = client_context() if tls else None
        self.namesrv_ssl_context = self.ssl_context if tls_namesrv is None else (
            client_context() if tls_namesrv else None)
        # a broker with aclEnable: every request signed with these (AclClientRPCHook)
        self.signer = AclClientRPCHook(credentials) if credentials is not None else None
        n = next(_instances)
        # "ip@pid" as Java's default instance name makes it; a second instance in one process
        # (two consumers of one group in a test) needs its own id or the broker sees one member.
        # A named instance keeps its id across restarts ("ip@name"), which is what finds a
        # broadcasting consumer's local offsets again.
        if instance_name:
            self.client_id = f"{_local_ip()}@{instance_name}"
        else:
            self.client_id = f"{_local_ip()}@{os.getpid()}" + (f"#{n}" if n else "")
        self.heartbeat_interval = heartbeat_interval
        self.conns: dict[str, ClientChannel] = {}
        # addresses reached in-process, not over TCP: "host:port" -> dial(channel), connecting the
        # channel with no socket (a broker's local-mode gRPC front reaching its own broker:
        # RemotingServer.connect_local). A route naming that address uses it like any connection.
        self.dialers: dict[str, Callable[[ClientChannel], None]] = {}
        # seconds a request waits on a dialed channel for others to share its write (ClientChannel.coalesce_delay)
        self.dialed_coalesce_delay = 0.0
        self._locks: dict[str, asyncio.Lock] = {}
        self.routes = RouteCache(self._fetch_route)
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, ConsumerMember] = {}
        # producer group -> what answers the broker's CHECK_TRANSACTION_STATE for it (a
        # TransactionProducer): check(request, connection) -> awaitable | None
        self.transaction_checkers: dict[str, object] = {}
        self._heartbeat_task: asyncio.Task | None = None
        self._started = 0  # producers and consumers using this instance

    # -- connections -------------------------------------------------------------------------------
    def channel_now(self, addr: str) -> ClientChannel | None:
        """The open connection to `addr`, without waiting; None when there is none yet."""
        conn = self.conns.get(addr)
        return conn if conn is not None and conn.transport is not None else None

    async def connection(self, addr: str) -> ClientChannel:
        conn = self.conns.get(addr)
        if conn is not None and conn.transport is not None:
            return conn
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:  # concurrent first sends share one connect
            conn = self.conns.get(addr)
            if conn is not None and conn.transport is not None:
                return conn
            dial = self.dialers.get(addr)
            if dial is not None:
                conn = open_channel_in_process(dial, addr, self._handle, self.signer)
                conn.coalesce_delay = self.dialed_coalesce_delay
                self.conns[addr] = conn
                return conn
            host, _, port = addr.rpartition(":")
            try:
                ctx = self.namesrv_ssl_context if addr in self.namesrv_addrs else self.ssl_context
                conn = await asyncio.wait_for(open_channel(host, int(port), self._handle, self.signer,
                                                           ssl_context=ctx), CONNECT_TIMEOUT)
            except asyncio.TimeoutError:
                raise BrokerUnreachable(addr, f"connect timed out after {CONNECT_TIMEOUT:g} s") from None
            except (OSError, ValueError) as e:
                raise BrokerUnreachable(addr, getattr(e, "strerror", None) or str(e)) from None
            self.conns[addr] = conn
            return conn

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """One request and its response; any transport failure is BrokerUnreachable naming `addr`."""
        conn = await self.connection(addr)
        try:
            return await conn.request(cmd, timeout)
        except asyncio.TimeoutError:  # before OSError: TimeoutError is one
            raise BrokerUnreachable(addr, f"no answer to request code {cmd.code} within {timeout:g} s") from None
        except OSError as e:
            self._drop(addr, conn)
            raise BrokerUnreachable(addr, str(e) or type(e).__name__) from None

    async def invoke_fast(self, addr: str, code: int, timeout: float, render, *args) -> Reply | RemotingCommand:
        """One request rendered by the client kernel, `render(channel.out, opaque, *args)`, and its
        answer: a Reply, or a RemotingCommand for a frame the kernel handed back. Transport
        failures are BrokerUnreachable naming `addr`, as invoke's."""
        conn = await self.connection(addr)
        opaque, fut = conn.fast_request(timeout)
        try:
            render(conn.out, opaque, *args)
        except BaseException:
            conn.forget(opaque)
            raise
        try:
            return await fut
        except asyncio.TimeoutError:
            raise BrokerUnreachable(addr, f"no answer to request code {code} within {timeout:g} s") from None
        except OSError as e:
            self._drop(addr, conn)
            raise BrokerUnreachable(addr, str(e) or type(e).__name__) from None

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        conn.oneway(cmd)

    def _drop(self, addr: str, conn: ClientChannel) -> None:
        if self.conns.get(addr) is conn:
            del self.conns[addr]
        conn.close()

    def _handle(self, cmd: RemotingCommand, conn: ClientChannel):
        """Requests the broker sends us: NOTIFY_CONSUMER_IDS_CHANGED makes the group rebalance now
        rather than on its 20 s timer."""
        if cmd.code == codes.NOTIFY_CONSUMER_IDS_CHANGED:
            consumer = self.consumers.get(cmd.get_str("consumerGroup", ""))
            if consumer is not None:
                consumer.rebalance_soon()
            return None
        if cmd.code == codes.CHECK_TRANSACTION_STATE:
            return self._check_transaction(cmd, conn)
        if cmd.is_oneway:
            return None
        return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED, remark=f"client does not serve code {cmd.code}")

    def _check_transaction(self, cmd: RemotingCommand, conn: ClientChannel):
        """ClientRemotingProcessor.checkTransactionState: the body is the half message; its PGROUP
        names the producer whose check listener answers (on this connection)."""
        try:
            [msg] = decode_messages(bytes(cmd.body))  # a copy: the receive buffer is reused
        except (MessageDecodeError, ValueError) as e:
            log.warning("CHECK_TRANSACTION_STATE from %s with an unreadable message: %s", conn.peer, e)
            return None
        checker = self.transaction_checkers.get(msg.properties.get("PGROUP", ""))
        if checker is None:
            log.warning("CHECK_TRANSACTION_STATE for group %r, which no producer here is of",
                        msg.properties.get("PGROUP"))
            return None
        return checker.check(cmd, msg, conn)

    # -- name servers ------------------------------------------------------------------------------
    async def namesrv_request(self, cmd_factory, timeout: float = NAMESRV_TIMEOUT) -> RemotingCommand:
        """The first answer of the name servers, tried in order; all unreachable → BrokerUnreachable
        naming every address tried."""
        errors = []
        for addr in self.namesrv_addrs:
            try:
                return await self.invoke(addr, cmd_factory(), timeout)
            except BrokerUnreachable as e:
                errors.append(e)
        if len(errors) == 1:
            raise errors[0]
        raise BrokerUnreachable(";".join(self.namesrv_addrs), "; ".join(str(e) for e in errors))

    async def _fetch_route(self, topic: str) -> TopicRoute:
        r = await self.namesrv_request(lambda: RemotingCommand.request(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if r.code == codes.TOPIC_NOT_EXIST:
            raise RouteNotFound(topic, r.remark or "")
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, f"route of {topic}")
        return parse_route(topic, r.body)

    async def namesrv_json(self, code: int, what: str, ext: dict | None = None) -> dict:
        r = await self.namesrv_request(lambda: RemotingCommand.request(code, ext or {}))
        if r.code != codes.SUCCESS:
            raise ResponseError(r.code, r.remark, what)
        return msgspec.json.decode(r.body) if r.body else {}

    # -- lifecycle and heartbeat -------------------------------------------------------------------
    async def start(self) -> None:
        self._started += 1
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.ensure_future(self._heartbeat_loop())

    async def shutdown(self) -> None:
        self._started -= 1
        if self._started > 0:
            return
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            self._heartbeat_task = None
        for addr, conn in list(self.conns.items()):
            self._drop(addr, conn)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            await self.send_heartbeat()

    def heartbeat_body(self) -> bytes:
        return msgspec.json.encode({
            "clientID": self.client_id,
            "producerDataSet": [{"groupName": g} for g in sorted(self.producer_groups)],
            "consumerDataSet": [c.consumer_data() for c in self.consumers.values()]})

    async def send_heartbeat(self) -> None:
        """To every broker of every known route; a broker that cannot be reached is logged and
        skipped (the next beat tries again)."""
        body = self.heartbeat_body()

        async def one(addr: str) -> None:
            try:
                r = await self.invoke(addr, RemotingCommand.request(codes.HEART_BEAT, {}, body), 3)
                if r.code != codes.SUCCESS:
                    log.warning("heartbeat to %s refused: %d %s", addr, r.code, r.remark)
            except BrokerUnreachable as e:
                log.warning("heartbeat failed: %s", e)
        await asyncio.gather(*(one(a) for a in sorted(self.routes.known_broker_addrs())))

    async def unregister(self, producer_group: str = "", consumer_group: str = "") -> None:
        """UNREGISTER_CLIENT (35) to every known broker, so the group rebalances without us now."""
        ext = {"clientID": self.client_id, "producerGroup": producer_group, "consumerGroup": consumer_group}

        async def one(addr: str) -> None:
            try:
                await self.invoke(addr, RemotingCommand.request(codes.UNREGISTER_CLIENT, ext), 3)
            except BrokerUnreachable as e:
                log.warning("unregister failed: %s", e)
        await asyncio.gather(*(one(a) for a in sorted(self.routes.known_broker_addrs())))
