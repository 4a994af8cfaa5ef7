"""DLedger's RPC between the members of a group (DLedgerRpcNettyService), over RocketMQ remoting.

A request is a remoting command with a DLedger request code and the JSON of the request object as
its body; the answer is a remoting response (code SUCCESS) whose body is the JSON of the response
object, the DLedger outcome in its own `code` field. One connection per peer, made when first
needed and made again after a failure; a call that cannot be made in its time raises, which the
elector counts as no answer.

The server side refuses, with a log line naming the peer and nothing else changed: a body that is
not the request's JSON (UNEXPECTED_ARGUMENT), another group's request (UNKNOWN_GROUP), a request
addressed to another member (UNKNOWN_MEMBER), and unknown request codes.

PUSH is the exception to the JSON bodies: its extFields and raw entry bytes are push_protocol's,
and the replication's own PeerClients (one per leader, apart from the elector's so that bulk
entries never queue ahead of a heartbeat) send it with `request`, several in flight.
"""
from __future__ import annotations

import asyncio
import logging

from broker.raft.config import DLedgerConfig
from broker.raft.elector import LeaderElector
from broker.raft.protocol import (HeartBeatRequest, HeartBeatResponse, ProtocolError, RequestCode, ResponseCode,
                                  VoteRequest, VoteResponse, decode, encode)
from broker.remoting import codes
from broker.remoting.codes import FLAG_ONEWAY
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import Handler, RemotingConnection, RemotingServer, connect

log = logging.getLogger("raft")
_PUSH = int(RequestCode.PUSH)
# How long a connect to a leader's peer port that succeeded is held to tell a live server (quiet)
# from an exiting process's listener (resets it), and how often the port is asked in all.
LISTENER_GRACE = 0.2
PORT_PROBES = 3


class PeerClients:
    """The elector's ElectionRpc: a lazily (re)made remoting connection per peer."""

    def __init__(self, config: DLedgerConfig):
        self.config = config
        self._conns: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Future] = {}

    async def _conn(self, peer_id: str) -> RemotingConnection:
        conn = self._conns.get(peer_id)
        if conn is not None and conn.transport is not None:
            return conn
        pending = self._connecting.get(peer_id)
        if pending is None:  # one connect per peer at a time: a heartbeat round and a vote share it
            peer = self.config.peers[peer_id]
            pending = self._connecting[peer_id] = asyncio.ensure_future(connect(peer.host, peer.port))
            pending.add_done_callback(lambda f, p=peer_id: self._connected(p, f))
        conn = await asyncio.shield(pending)
        self._conns[peer_id] = conn
        return conn

    def _connected(self, peer_id: str, f: asyncio.Future) -> None:
        self._connecting.pop(peer_id, None)
        if not f.cancelled():
            f.exception()  # retrieved: every caller may have given up (cancelled) before it failed

    async def _call(self, peer_id: str, code: RequestCode, body: bytes, timeout: float) -> bytes:
        async def call():
            conn = await self._conn(peer_id)
            try:
                reply = await conn.request(RemotingCommand.request(int(code), body=body), timeout)
            except (ConnectionError, asyncio.TimeoutError):
                self.drop(peer_id)
                raise
            if reply.code != codes.SUCCESS:
                raise ConnectionError(f"{peer_id} answered {code.name} with remoting code {reply.code}: {reply.remark}")
            return bytes(reply.body)
        return await asyncio.wait_for(call(), timeout)

    async def vote(self, peer_id: str, request: VoteRequest, timeout: float) -> VoteResponse:
        return decode(VoteResponse, await self._call(peer_id, RequestCode.VOTE, encode(request), timeout))

    async def heartbeat(self, peer_id: str, request: HeartBeatRequest, timeout: float) -> HeartBeatResponse:
        return decode(HeartBeatResponse, await self._call(peer_id, RequestCode.HEART_BEAT, encode(request), timeout))

    async def request(self, peer_id: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """One request (a PUSH) and its reply, whatever the reply's code. A connected peer costs no
        task: only connecting is bounded (asyncio.timeout: Python 3.11's wait_for, cancelled as the
        connect fails, raises the connect's error and swallows the cancellation); the answer is
        bounded by the connection's own timer. No answer drops the connection (the next call makes
        a new one) and raises."""
        conn = self._conns.get(peer_id)
        if conn is None or conn.transport is None:
            async with asyncio.timeout(timeout):
                conn = await self._conn(peer_id)
        try:
            return await conn.request(cmd, timeout)
        except (ConnectionError, asyncio.TimeoutError):
            self.drop(peer_id)
            raise

    def drop(self, peer_id: str, abort: bool = False) -> None:
        """Close the connection to a peer; `abort` discards what is still unsent (a deposed
        leader's pushes, whose bytes are views of a log it may be about to truncate)."""
        conn = self._conns.pop(peer_id, None)
        if conn is not None:
            if abort and conn.transport is not None:
                conn.transport.abort()
            else:
                conn.close()

    def close(self, abort: bool = False) -> None:
        for peer_id in list(self._conns):
            self.drop(peer_id, abort)
        for f in self._connecting.values():
            f.cancel()


class ElectionServer:
    """Answers a group's VOTE and HEART_BEAT requests on this member's peer address, and its PUSH
    requests when given a `push` handler (DLedgerServer's EntryHandler.handle, which checks the
    group and the addressee itself); without one a PUSH is not supported here. Requests with
    other codes go to `other` when given: RocketMQ's controller answers brokers on its DLedger
    member's remoting server, so its peer address is also its service address."""

    def __init__(self, config: DLedgerConfig, elector: LeaderElector, host: str | None = None, port: int | None = None,
                 push: Handler | None = None, other: Handler | None = None):
        self.config = config
        self.elector = elector
        self.push = push
        self.other = other
        me = config.self_peer
        self.server = RemotingServer(self.handle, host or me.host, me.port if port is None else port)
        self._watches: set[asyncio.Task] = set()  # one per link a leader's heartbeats came on

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()

    async def close(self) -> None:
        for t in list(self._watches):
            t.cancel()
        await self.server.close()

    # -- a leader's death seen from its heartbeat link -------------------------------------------
    def _watch_link(self, conn: RemotingConnection, leader_id: str) -> None:
        """Once per connection that carried a heartbeat: when it closes while its sender leads
        this follower, ask the sender's peer port whether anything listens there."""
        if conn.attrs.get("dledger_heartbeats_from") is not None:
            return
        conn.attrs["dledger_heartbeats_from"] = leader_id
        t = asyncio.get_running_loop().create_task(self._on_link_closed(conn, leader_id))
        self._watches.add(t)
        t.add_done_callback(self._watches.discard)

    async def _on_link_closed(self, conn: RemotingConnection, leader_id: str) -> None:
        await conn.closed.wait()
        st = self.elector.state
        if not st.is_follower or st.leader_id != leader_id:
            return
        term = st.term
        peer = self.config.peers[leader_id]
        if await self._port_refuses(peer):
            self.elector.leader_gone(term, leader_id)
        else:
            log.info("[%s] the heartbeat link of leader %s closed but its peer port %s:%d is not refusing: "
                     "its heartbeats decide", st.self_id, leader_id, peer.host, peer.port)

    async def _port_refuses(self, peer) -> bool:
        """Whether nothing listens on a peer port: proof that the process is gone.

        A process killed with -9 closes its sockets one by one as it exits, so the heartbeat
        link's close can arrive while its listening socket still exists: a connect then lands in
        that socket's backlog and is reset a moment later, when the exit closes the listener.
        Taken as a sign of life, that connect would make the follower wait out maxHeartBeatLeak
        (6 s at DLedger's defaults). So a connect that succeeds is
        held for LISTENER_GRACE: a live server accepts it and stays quiet; an exiting one resets
        it, and the port is asked again. Unreachable (a timeout, another error) is no proof of
        death (a partition): the heartbeat timeout decides then."""
        timeout = self.config.heartBeatTimeIntervalMs / 1000
        for _ in range(PORT_PROBES):
            try:
                async with asyncio.timeout(timeout):
                    reader, writer = await asyncio.open_connection(peer.host, peer.port)
            except ConnectionRefusedError:
                return True
            except (OSError, TimeoutError) as e:
                log.info("peer port %s:%d unreachable (%r): no proof that its process is gone", peer.host,
                         peer.port, e)
                return False
            try:
                async with asyncio.timeout(LISTENER_GRACE):
                    await reader.read(1)  # b"" or a reset: the listener went away with us in its backlog
            except TimeoutError:
                return False  # accepted and quiet: the process lives, its heartbeats decide
            except OSError:
                pass
            finally:
                writer.close()
        return False

    def _push(self, cmd: RemotingCommand, conn: RemotingConnection):
        res = self.push(cmd, conn)
        # the leader's replication link is watched as its heartbeat link is: a member that
        # has had pushes but no heartbeat yet from a new leader (one restarted a moment ago)
        # learns of its death as fast as the others
        if conn.attrs.get("dledger_heartbeats_from") is None:
            st = self.elector.state
            if st.is_follower and st.leader_id is not None and st.leader_id == (cmd.ext or {}).get("leaderId"):
                self._watch_link(conn, st.leader_id)
        return res

    def handle(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        if cmd.code == _PUSH and self.push is not None and not cmd.flag & FLAG_ONEWAY:
            return self._push(cmd, conn)  # the replication's requests, first and without an enum lookup
        if cmd.is_oneway:
            if self.other is not None and cmd.code not in RequestCode._value2member_map_:
                return self.other(cmd, conn)  # a broker's heartbeat may come oneway
            return None
        try:
            code = RequestCode(cmd.code)
        except ValueError:
            if self.other is not None:
                return self.other(cmd, conn)
            return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED, remark=f"request code {cmd.code} not supported")
        if code is RequestCode.VOTE:
            typ, answer_type, handler = VoteRequest, VoteResponse, self.elector.handle_vote
        elif code is RequestCode.HEART_BEAT:
            typ, answer_type, handler = HeartBeatRequest, HeartBeatResponse, self.elector.handle_heartbeat
        elif code is RequestCode.PUSH and self.push is not None:
            return self._push(cmd, conn)
        else:
            return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED, remark=f"DLedger request {code.name} not served here")
        me = self.config.dLegerSelfId
        try:
            req = decode(typ, cmd.body)
        except ProtocolError as e:
            log.warning("[%s] malformed %s from %s refused: %s", me, code.name, conn.peer, e)
            return self._refuse(cmd, answer_type, ResponseCode.UNEXPECTED_ARGUMENT)
        if req.group != self.config.dLegerGroup:
            log.warning("[%s] %s for group %r from %s refused: this member is in %r", me, code.name, req.group,
                        conn.peer, self.config.dLegerGroup)
            return self._refuse(cmd, answer_type, ResponseCode.UNKNOWN_GROUP)
        if req.remoteId is not None and req.remoteId != me:
            log.warning("[%s] %s addressed to %r from %s refused", me, code.name, req.remoteId, conn.peer)
            return self._refuse(cmd, answer_type, ResponseCode.UNKNOWN_MEMBER)
        answer = handler(req)
        if code is RequestCode.HEART_BEAT and answer.code == ResponseCode.SUCCESS:
            self._watch_link(conn, req.leaderId)
        return cmd.response(codes.SUCCESS, body=encode(answer))

    def _refuse(self, cmd: RemotingCommand, answer_type: type, code: ResponseCode) -> RemotingCommand:
        st = self.elector.state
        return cmd.response(codes.SUCCESS, body=encode(answer_type(term=st.term, localId=st.self_id, code=int(code))))
