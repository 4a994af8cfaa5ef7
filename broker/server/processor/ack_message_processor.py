"""AckMessageProcessor: ACK_MESSAGE (200051) and BATCH_ACK_MESSAGE (200151). A popped message is
acked by its receipt handle (the extraInfo) and queue offset: the ack is written to the revive log
and the message is never redelivered. An orderly pop's ack (reviveQid 999) moves the group's offset
past the batch's acked head instead. A handle that names nothing in flight is answered NO_MESSAGE
and acks nothing. An answer waits until the records it wrote are durable (pop_role.reply_when_durable).

BATCH_ACK_MESSAGE's body is BatchAckMessageRequestBody's JSON: {"brokerName", "acks": [{"c": group,
"t": topic, "r": retry flag, "so": checkpoint offset, "q": queueId, "rq": reviveQid, "pt": popTime,
"it": invisibleTime, "b": base64 of java.util.BitSet.toByteArray(), bit i acking offset so + i}]}.
Every ack that names a message in flight is made; the others are named in a NO_MESSAGE answer.
The local gRPC front hands the same acks over as values (batch_ack_code, through
broker.proxy.local_broker), and both run ack_batches.
"""
from __future__ import annotations

import base64
import binascii

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import AckMessageRequestHeader, decode
from broker.common import extra_info as ei
from broker.server.pop.pop_revive_service import NotInFlight, not_popped
from broker.server.pop.pop_role import reply_when_durable
from broker.server.processor.send_processor import STATUS_CODES, STORED_STATUSES, reply_when_put
from broker.remoting.refusals import BadRequest, Refusal, TopicNotExist


class MessageIllegal(Refusal):
    response_code = codes.MESSAGE_ILLEGAL


def queue_range(store, topics, topic: str, queue_id: int) -> tuple[int, int]:
    """The queue's [min, max) offsets, once the topic and queue are known to exist."""
    cfg = topics.get(topic)
    if cfg is None:
        raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
    if not 0 <= queue_id < cfg.readQueueNums:
        raise MessageIllegal(f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                             f"topicConfig.readQueueNums:[{cfg.readQueueNums}]")
    return store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)


def check_offset(topic: str, queue_id: int, offset: int, lo: int, hi: int) -> None:
    if not lo <= offset < hi:
        raise NotInFlight(f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{lo}~{hi}")


def checked_handle(store, topics, topic: str, queue_id: int, offset: int, extra_info: str) -> ei.ExtraInfo:
    """The request's topic, queue and offset checked against the store, and its extraInfo parsed
    and checked against them (AckMessageProcessor's and ChangeInvisibleTimeProcessor's checks)."""
    lo, hi = queue_range(store, topics, topic, queue_id)
    check_offset(topic, queue_id, offset, lo, hi)
    info = ei.parse(extra_info)
    if info.queue_id != queue_id or (info.queue_offset is not None and info.queue_offset != offset):
        raise ei.ExtraInfoError(f"extraInfo names queue {info.queue_id} offset {info.queue_offset}, the request "
                                f"queue {queue_id} offset {offset}")
    if info.retry != ei.retry_flag(topic):
        raise ei.ExtraInfoError(f"extraInfo retry flag {info.retry} does not fit topic {topic}")
    return info


class AckMessageProcessor:
    def __init__(self, store, topics, holds, revive, order_info):
        self.store = store
        self.topics = topics
        self.holds = holds
        self.revive = revive
        self.order_info = order_info

    def handlers(self) -> dict:
        return {codes.ACK_MESSAGE: self.ack, codes.BATCH_ACK_MESSAGE: self.batch_ack}

    def ack(self, cmd: RemotingCommand, conn):
        h = decode(AckMessageRequestHeader, cmd.ext)
        info = checked_handle(self.store, self.topics, h.topic, h.queueId, h.offset, h.extraInfo)
        mark = self.revive.log.appended
        if info.is_order:
            self._ack_orderly(h, info)
        else:
            ck, i = self.revive.find(h.consumerGroup, h.topic, h.queueId, info.ck_offset, info.pop_time, h.offset,
                                     info.revive_qid)
            self.revive.ack(ck, i)
        return reply_when_durable(cmd, cmd.response(codes.SUCCESS), self.revive.log.durable_since(mark))

    def batch_ack(self, cmd: RemotingCommand, conn):
        mark = self.revive.log.appended
        failed = self.ack_batches(_batch_acks(bytes(cmd.body or b"")))
        res = (cmd.response(codes.NO_MESSAGE, remark=f"not acked: {'; '.join(failed)[:2000]}") if failed
               else cmd.response(codes.SUCCESS))  # (the acks not named in the remark were made)
        return reply_when_durable(cmd, res, self.revive.log.durable_since(mark))

    def batch_ack_code(self, acks):
        """BATCH_ACK_MESSAGE handed its acks as values (the local gRPC front's entry,
        broker.proxy.local_broker): `acks` as `_batch_acks` reads them from the wire's body. The
        response code batch_ack would answer (SUCCESS, or NO_MESSAGE when any was not acked), or
        a future of it while the records wait to be durable, as reply_when_durable answers."""
        log = self.revive.log
        mark = log.appended
        # one usual BatchAck (a receive's handles) straight to the kernel; ack_batches otherwise.
        # Only the failures' count matters here, not their texts
        missing = self._ack_usual(*acks[0]) if len(acks) == 1 else None
        if missing is None:
            code = codes.NO_MESSAGE if self.ack_batches(acks) else codes.SUCCESS
        else:
            code = codes.NO_MESSAGE if missing else codes.SUCCESS
        if log.appended == mark:  # (durable_since without its call)
            return code
        put = log.last_put
        if put is None:
            return code
        return reply_when_put(put, lambda status, why: code if status in STORED_STATUSES
                              else STATUS_CODES.get(status, codes.SYSTEM_ERROR))

    def ack_batches(self, acks) -> list[str]:
        """Each BatchAck of `acks` ((group, real topic, queueId, checkpoint offset, reviveQid,
        popTime, [offsets ascending, distinct])) made; what was not acked, each named with why."""
        failed = []
        store, topics, inflight = self.store, self.topics, self.revive.inflight
        for group, topic, queue_id, ck_offset, rq, pop_time, offsets in acks:
            # the usual batch first (_ack_usual: one kernel call, on this checkpoint when it takes it)
            ck = inflight.get((group, topic, queue_id, ck_offset, pop_time))
            missing = self._ack_usual(group, topic, queue_id, ck_offset, rq, pop_time, offsets)
            if missing is not None:
                if missing:
                    for offset in missing:  # named as find names them
                        failed.append(f"{topic}@{queue_id}:{offset} ({not_popped(ck, offset)})")
                continue
            # checked_handle's checks, in its order, made once for what the offsets share: the
            # topic and queue, then (after each offset's range) the handle's other fields (the
            # queue's bounds as queue_range reads them, without its call and tuple when the topic
            # and queue are known)
            cfg = topics.get(topic)
            if cfg is not None and 0 <= queue_id < cfg.readQueueNums:
                lo, hi = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            else:
                try:
                    lo, hi = queue_range(store, topics, topic, queue_id)
                except Refusal as e:
                    failed.extend(f"{topic}@{queue_id}:{offset} ({e})" for offset in offsets)
                    continue
            info, bad = _head(group, topic, queue_id, ck_offset, rq, pop_time)
            if bad is None and not info.is_order and self._ack_checkpoint(group, topic, queue_id, ck_offset, rq,
                                                                          pop_time, offsets, lo, hi, failed):
                continue
            found: dict[int, tuple] = {}  # id(checkpoint) -> (checkpoint, its indexes acked here)
            for offset in offsets:
                try:
                    check_offset(topic, queue_id, offset, lo, hi)
                    if bad is not None:
                        raise bad
                    if info.is_order:
                        self._ack_orderly(_OrderAck(group, topic, queue_id, offset), info)
                    else:
                        ck, i = self.revive.find(group, topic, queue_id, ck_offset, pop_time, offset, rq)
                        found.setdefault(id(ck), (ck, []))[1].append(i)
                except Refusal as e:
                    failed.append(f"{topic}@{queue_id}:{offset} ({e})")
            for ck, indexes in found.values():  # one revive-log record per checkpoint (BatchAckMsg)
                self.revive.ack_many(ck, indexes)
        return failed

    def _ack_usual(self, group: str, topic: str, queue_id: int, ck_offset: int, rq: int, pop_time: int,
                   offsets: list[int]) -> list[int] | None:
        """The usual BatchAck acked by one kernel call (PopReviveService.ack_offsets), as
        _ack_checkpoint would ack it: a non-orderly pop's handle whose fields _head takes as they
        are, on a known topic and queue, every offset within the queue's bounds (queue_range's,
        without its call and tuple), its checkpoint in flight in the same revive queue. The
        offsets that checkpoint did not pop (the others acked), or None when it is not such a
        batch or the kernel declines: nothing done, and ack_batches' checks answer it."""
        # the fields within _head's ranges, two at a time: a | b is negative when either is and at
        # least either (so a pair at the 2^31 bound, which _head takes, is declined here: the slow
        # path answers it the same)
        if not offsets or rq == _ORDER_RQ or not (0 <= rq | queue_id < _I31 and 0 <= ck_offset | pop_time <= _I64):
            return None
        cfg = self.topics.get(topic)
        if cfg is None or queue_id >= cfg.readQueueNums:
            return None
        store = self.store
        if not store.min_offset(topic, queue_id) <= offsets[0] or not offsets[-1] < store.max_offset(topic, queue_id):
            return None
        key = (group, topic, queue_id, ck_offset, pop_time)
        revive = self.revive
        ck = revive.inflight.get(key)  # (PopReviveService.checkpoint)
        if ck is None or ck.rq != rq:
            return None
        return revive.ack_offsets(ck, offsets, key)

    def _ack_checkpoint(self, group: str, topic: str, queue_id: int, ck_offset: int, rq: int, pop_time: int,
                        offsets: list[int], lo: int, hi: int, failed: list) -> bool:
        """A BatchAck's offsets (ascending) within the queue, acked as one operation: their
        checkpoint found once and each offset's index read from it, one revive-log record. False
        (nothing done) when the offsets leave the queue or no such checkpoint is in flight: the
        offset-by-offset loop then answers each as it does. An offset the checkpoint did not pop is
        named in `failed` as find names it; the others are acked."""
        if not offsets or offsets[0] < lo or offsets[-1] >= hi:
            return False
        try:
            ck = self.revive.checkpoint(group, topic, queue_id, ck_offset, pop_time, rq)
        except Refusal:
            return False
        so, diffs = ck.start_offset, ck.diffs
        n = len(diffs) if diffs else ck.num
        if so <= offsets[0] and offsets[-1] < so + n and (not diffs or n < len(_RANGES) and diffs == _RANGES[n]):
            # what a pop without a filter leaves: consecutive offsets from so (index_of is o - so)
            self.revive.ack_many(ck, [o - so for o in offsets])
            return True
        popped = ck.offsets()
        index = {o: i for i, o in enumerate(popped)}
        if len(index) != len(popped):
            return False  # an offset popped twice in one checkpoint (never ours): index_of's first
        indexes = []
        for offset in offsets:
            i = index.get(offset)
            if i is None:
                try:
                    self.revive.find(group, topic, queue_id, ck_offset, pop_time, offset, rq)
                except Refusal as e:
                    failed.append(f"{topic}@{queue_id}:{offset} ({e})")
                    continue
                i = ck.index_of(offset)
            indexes.append(i)
        if indexes:
            self.revive.ack_many(ck, indexes)
        return True

    def _ack_orderly(self, h, info: ei.ExtraInfo) -> None:
        offsets = self.store.consumer_offsets
        if h.offset < offsets.query(h.consumerGroup, h.topic, h.queueId):
            return  # acked already (RocketMQ answers success)
        nxt = self.order_info.commit_and_next(h.topic, h.consumerGroup, h.queueId, h.offset, info.pop_time)
        if nxt == -2:
            raise NotInFlight(f"the batch of {h.topic}@{h.queueId} popped at {info.pop_time} is no longer out "
                              f"(its invisible time passed and it was popped again)")
        if nxt < 0:
            raise NotInFlight(f"offset {h.offset} of {h.topic}@{h.queueId} is not in the orderly batch out for "
                              f"{h.consumerGroup}")
        info_now = self.order_info.get(h.topic, h.consumerGroup, h.queueId)
        if info_now is not None and info_now.all_acked():
            self.holds.notify(h.topic, h.queueId, -1)  # the queue opens: a held orderly pop looks again


def _head(group: str, topic: str, queue_id: int, ck_offset: int, rq: int, pop_time: int):
    """(the ExtraInfo a BatchAck's fields make, None), or (None, the refusal ei.parse gives them):
    built at once when every field is in parse's range, else parsed for the error naming it."""
    if 0 <= ck_offset <= _I64 and 0 <= pop_time <= _I64 and 0 <= rq <= 1 << 31 and 0 <= queue_id <= 1 << 31:
        return ei.ExtraInfo(ck_offset, pop_time, 0, rq, ei.retry_flag(topic), "", queue_id, 0), None
    try:
        return ei.parse(ei.SEP.join(map(str, (ck_offset, pop_time, 0, rq, ei.retry_flag(topic), "", queue_id, 0)))), \
            None
    except Refusal as e:
        return None, e


_I64 = (1 << 63) - 1
_I31 = 1 << 31
_ORDER_RQ = ei.POP_ORDER_REVIVE_QUEUE
_RANGES = [list(range(n)) for n in range(257)]  # a checkpoint's diffs when it popped consecutive offsets


class _OrderAck:
    __slots__ = ("consumerGroup", "topic", "queueId", "offset")

    def __init__(self, group, topic, queue_id, offset):
        self.consumerGroup, self.topic, self.queueId, self.offset = group, topic, queue_id, offset


def _batch_acks(body: bytes):
    """(group, real topic, queueId, checkpoint offset, reviveQid, popTime, [offsets]) of each BatchAck."""
    try:
        data = msgspec.json.decode(body) if body else None
    except (msgspec.DecodeError, RecursionError) as e:
        raise BadRequest(f"batch ack body is not JSON: {e}") from None
    acks = data.get("acks") if isinstance(data, dict) else None
    if not isinstance(acks, list) or not acks or not all(isinstance(a, dict) for a in acks):
        raise BadRequest("batch ack body has no list of acks")
    out = []
    for i, a in enumerate(acks):
        try:
            group, so, q, rq, pt = str(a["c"]), int(a["so"]), int(a["q"]), int(a["rq"]), int(a["pt"])
            topic = ei.real_topic(str(a["t"]), group, str(a.get("r", "0")))
            bits = int.from_bytes(base64.b64decode(a.get("b") or "", validate=True), "little")
        except (KeyError, TypeError, ValueError, binascii.Error) as e:
            raise BadRequest(f"acks[{i}] is malformed: {e!r}") from None
        if bits.bit_length() > 1024:
            raise BadRequest(f"acks[{i}] acks more than 1024 offsets")
        out.append((group, topic, q, so, rq, pt, [so + j for j in range(bits.bit_length()) if bits >> j & 1]))
    return out
