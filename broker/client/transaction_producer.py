"""TransactionProducer (RocketMQ's TransactionMQProducer): a message sent as a half message, made
visible or dropped by the outcome of a local transaction.

send_message_in_transaction sends the message with TRAN_MSG=true and its group in PGROUP (the
PREPARED type in sysFlag), runs the listener's execute_local_transaction, and ends the half
message with END_TRANSACTION (oneway, as Java's endTransactionOneway): COMMIT_MESSAGE stores the
message for consumers, ROLLBACK_MESSAGE drops it, UNKNOW leaves it to the broker, which asks a
producer of the group later (CHECK_TRANSACTION_STATE): the listener's check_local_transaction
answers, with fromTransactionCheck=true. Either listener method may be a coroutine function; one
that raises counts as UNKNOW (Java's behaviour: the broker will ask again).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from broker.client.admin import decode_offset_msg_id
from broker.client.client_instance import MQClientInstance
from broker.client.errors import ClientError
from broker.client.message import Message, MessageExt
from broker.client.producer import SEND_OK, Producer, SendResult
from broker.remoting import codes
from broker.remoting.command import RemotingCommand

log = logging.getLogger("client.transaction")

PROPERTY_TRANSACTION_PREPARED, PROPERTY_PRODUCER_GROUP = "TRAN_MSG", "PGROUP"
TRANSACTION_PREPARED_TYPE = 0x4  # MessageSysFlag
DEFAULT_TOPIC = "TBW102"  # createTopicKey: its route names the brokers to heartbeat before any send


class LocalTransactionState(str, Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # sic, RocketMQ's spelling


# END_TRANSACTION's commitOrRollback: MessageSysFlag's transaction types
END_TYPE = {LocalTransactionState.COMMIT_MESSAGE: 0x8, LocalTransactionState.ROLLBACK_MESSAGE: 0xC,
             LocalTransactionState.UNKNOW: 0}


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState: ...


@dataclass(slots=True)
class TransactionSendResult:
    send_result: SendResult
    local_transaction_state: LocalTransactionState
    transaction_id: str  # the message's UNIQ_KEY, as Java's

    @property
    def status(self) -> str:
        return self.send_result.status


def offset_of(offset_msg_id: str) -> int:
    """The commit-log offset in an offsetMsgId (ClientError when it is none)."""
    return decode_offset_msg_id(offset_msg_id)[1]


def prepared_body(msg: Message, body_flag: tuple[bytes, int]) -> tuple[bytes, int]:
    """A half message (TRAN_MSG=true) carries the PREPARED type in its sysFlag (sendKernelImpl)."""
    body, sys_flag = body_flag
    if msg.properties.get(PROPERTY_TRANSACTION_PREPARED) == "true":
        sys_flag |= TRANSACTION_PREPARED_TYPE
    return body, sys_flag


async def _outcome(fn, *args) -> tuple[LocalTransactionState, BaseException | None]:
    """A listener's answer (awaited when it is a coroutine); a failure or a wrong type is UNKNOW."""
    try:
        state = fn(*args)
        if inspect.isawaitable(state):
            state = await state
        return LocalTransactionState(state), None
    except Exception as e:  # the user's code: the broker asks again later
        log.warning("%s raised %r: UNKNOW", getattr(fn, "__name__", fn), e)
        return LocalTransactionState.UNKNOW, e


class TransactionProducer(Producer):
    def __init__(self, group: str, listener: TransactionListener, namesrv_addr: str | None = None,
                 client: MQClientInstance | None = None, topics: tuple[str, ...] = (), **kw):
        super().__init__(group, namesrv_addr, client, **kw)
        self.listener = listener
        self.topics = topics  # topics whose brokers hear this producer's heartbeat from the start
        self._checks: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Start, and heartbeat at once to every broker of TBW102's route and of `topics` (as
        Java's producer does at start): a broker asks only producers it has heard of, and a
        producer started to answer checks (after another crashed) may send nothing at all."""
        if self.group in self.client.transaction_checkers:
            raise ClientError(f"a transaction producer of group {self.group} is already started on this client")
        self.client.transaction_checkers[self.group] = self
        await super().start()
        for topic in (DEFAULT_TOPIC, *self.topics):
            try:
                await self.client.routes.get(topic)
            except ClientError as e:
                log.info("no route of %s yet (%s): its brokers hear the heartbeat after the first send", topic, e)
        await self.client.send_heartbeat()

    async def shutdown(self) -> None:
        if self._checks:
            await asyncio.gather(*self._checks, return_exceptions=True)
        if self.client.transaction_checkers.get(self.group) is self:
            del self.client.transaction_checkers[self.group]
        await super().shutdown()

    def _body(self, msg: Message) -> tuple[bytes, int]:
        return prepared_body(msg, super()._body(msg))

    async def send_message_in_transaction(self, msg: Message, arg: Any = None,
                                          timeout: float = 3.0) -> TransactionSendResult:
        """Send `msg` as a half message, run the local transaction, end it. Raises SendFailed if
        the half message could not be sent (nothing is then executed)."""
        if msg.delay_level:
            raise ClientError("a transactional message cannot be delayed (delay_level must be 0)")
        msg.properties = {**msg.properties, PROPERTY_TRANSACTION_PREPARED: "true",
                          PROPERTY_PRODUCER_GROUP: self.group}
        r = await self.send(msg, timeout)
        if r.status == SEND_OK:
            msg.properties.setdefault("UNIQ_KEY", r.msg_id)
            state, err = await _outcome(self.listener.execute_local_transaction, msg, arg)
        else:  # stored, but not as durable as asked: Java rolls it back
            state, err = LocalTransactionState.ROLLBACK_MESSAGE, None
        await self._end(r, state, err)
        return TransactionSendResult(r, state, r.msg_id)

    async def _end(self, r: SendResult, state: LocalTransactionState, err: BaseException | None) -> None:
        """DefaultMQProducerImpl.endTransaction: oneway to the master the half message is on."""
        route = await self.client.routes.get(r.queue.topic)
        addr = route.master_addr(r.queue.broker_name)
        if addr is None:
            log.warning("no master of %s to end half message %s: the broker will check it", r.queue.broker_name,
                        r.msg_id)
            return
        ext = {"producerGroup": self.group, "tranStateTableOffset": str(r.queue_offset),
               "commitLogOffset": str(offset_of(r.offset_msg_id)), "commitOrRollback": str(END_TYPE[state]),
               "fromTransactionCheck": "false", "msgId": r.msg_id, "transactionId": r.msg_id}
        cmd = RemotingCommand.request(codes.END_TRANSACTION, ext, oneway=True)
        if err is not None:
            cmd.remark = f"executeLocalTransactionBranch exception: {err!r}"
        await self.client.invoke_oneway(addr, cmd)

    # -- the broker asks ---------------------------------------------------------------------------
    def check(self, cmd: RemotingCommand, msg: MessageExt, conn) -> None:
        """CHECK_TRANSACTION_STATE for a half message of this group: the check listener runs in
        a task (the connection's read goes on), its answer goes back on the same connection."""
        ext = {"tranStateTableOffset": cmd.get_str("tranStateTableOffset", ""),
               "commitLogOffset": cmd.get_str("commitLogOffset", ""),
               "transactionId": cmd.get_str("transactionId", "")}
        task = asyncio.ensure_future(self._answer_check(ext, msg, conn))
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)
        return None

    async def _answer_check(self, ext: dict, msg: MessageExt, conn) -> None:
        state, err = await _outcome(self.listener.check_local_transaction, msg)
        uniq = msg.properties.get("UNIQ_KEY") or msg.msg_id
        header = {"producerGroup": self.group, "tranStateTableOffset": ext["tranStateTableOffset"],
                  "commitLogOffset": ext["commitLogOffset"], "commitOrRollback": str(END_TYPE[state]),
                  "fromTransactionCheck": "true", "msgId": uniq, "transactionId": ext["transactionId"] or uniq}
        cmd = RemotingCommand.request(codes.END_TRANSACTION, header, oneway=True)
        if err is not None:
            cmd.remark = f"checkLocalTransactionState exception: {err!r}"
        if conn.transport is None:
            log.warning("the broker's connection closed before half message %s was answered", uniq)
            return
        conn.oneway(cmd)
