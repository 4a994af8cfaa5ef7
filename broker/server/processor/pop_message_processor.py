"""PopMessageProcessor: POP_MESSAGE (200050). The broker picks the queue and the offset: it reads
from the group's pop offset, writes a checkpoint of what it hands out (PopReviveService) and moves
the offset past it at once for pops, so a second consumer of the group gets the next messages,
never these while they are invisible; the offset table, which followers copy, takes the move once
the checkpoint is durable (PopOffsets). The pop retry topic %RETRY%<group>_<topic> (what the revive service
re-stored) is read too. An orderly pop (order=true) hands out one batch per queue at a time
(ConsumerOrderInfoManager) and writes no checkpoint.

The response is RocketMQ's: the stored records as the body (views of the log, as a pull's), and
popTime, invisibleTime, reviveQid, restNum, startOffsetInfo, msgOffsetInfo (and orderCountInfo)
in the header, from which the client builds each message's receipt handle (extra_info).
Nothing found: held up to pollTime (long polling, woken by an append to any queue it reads, as a
held pull is), then POLLING_TIMEOUT. Messages found are answered once the checkpoints written for
them are durable (pop_role.reply_when_durable): in DLedger mode once a majority holds them, so a
leader killed after answering leaves them to the next leader to revive.

The local gRPC front hands the request's fields over as values (`pop_values`, through
broker.proxy.local_broker) and reads the answer as values (a `Popped`: the records' views, popTime,
reviveQid, restNum, the start offsets), with no RemotingCommand and no header strings; the wire's
`pop` runs the same code (`_pop`) and renders the same values into its response.
"""
from __future__ import annotations

import asyncio
import random
import time

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.server.filter.expression_type import pop_filter
from broker.remoting.headers import PopMessageRequestHeader, decode
from broker.common import extra_info as ei
from broker.server.pop.consumer_order_info_manager import now_ms
from broker.server.pop.pop_revive_service import contiguous_diffs
from broker.server.pop.pop_role import NotMaster, not_kept, not_master_remark
from broker.server.processor.send_processor import reply_when_put
from broker.server.pop.revive_log import REVIVE_GROUP, REVIVE_TOPIC_PREFIX
from broker.remoting.refusals import NoPermission, Refusal, TopicNotExist
from broker.common.topic_validator import check_topic_name
from broker.store.pop_check_point import PopCheckPoint
from broker.store.results import GetStatus

MAX_POP_NUMS = 32  # RocketMQ refuses more
MAX_TRANSFER_BYTES = 256 * 1024
POP_FROM_RETRY_PROBABILITY = 20  # BrokerConfig.popFromRetryProbability: % of pops that read retry first
INIT_MODE_MIN = 0  # ConsumeInitMode.MIN; MAX = 1
CHECKED_MAX = 4096  # (topic, group, filter) checks kept (PopMessageProcessor._check)
CHECKED_EXP_MAX = 1024  # characters of an expression whose check is kept
_random = random.random
_time = time.time
_RETRY_FIRST = POP_FROM_RETRY_PROBABILITY / 100  # random.randrange(100) < 20, as a random() draw
_MOVED = (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_FOUND_NULL)


_QUEUE_KEYS: dict[tuple[str, int], str] = {}  # (topic, queueId) -> ei.queue_key's: made per receive, kept


def _queue_key(topic: str, queue_id: int) -> str:
    if len(_QUEUE_KEYS) >= 4096:  # (bounded: topics come from requests)
        _QUEUE_KEYS.clear()
    key = _QUEUE_KEYS[(topic, queue_id)] = ei.queue_key(topic, queue_id)
    return key


_NO_OFFSETS: dict = {}  # (a group's queues not in the offset table: read only, never filled)


class InvalidParameter(Refusal):
    response_code = codes.INVALID_PARAMETER


class Popped:
    """What one POP_MESSAGE gathered across the queues it read, as values: the wire's response
    is rendered from it (PopMessageProcessor._response), the local front reads it as it is.
    `code` None: found (SUCCESS) or not (POLLING_TIMEOUT) by `count`; else the refusal's code and
    `remark` (a held pop no longer served, a revive record the store did not keep)."""
    __slots__ = ("pop_time", "mark", "revive_qid", "invisible_time", "views", "count", "starts", "msgs",
                 "order_info", "_rest", "unread", "_store", "blocked_until", "code", "remark")

    def __init__(self, pop_time: int, revive_qid: int, mark: int, invisible_time: int, store=None):
        self.pop_time = pop_time
        self.mark = mark  # the revive log's count of appends before this look (ReviveLog.durable_since)
        self.revive_qid = revive_qid
        self.invisible_time = invisible_time
        # the records: views of the log, one per run of records back to back in it (() until some are
        # read: the first queue read gives its own list; fewer containers a pop for the collector)
        self.views: list | tuple = ()
        self.count = 0  # records in `views`
        self.starts: list[tuple[str, int, int]] = []  # (topic, queueId, the checkpoint's start offset)
        self.msgs: list[tuple[str, int, list[int]]] = []  # (topic, queueId, the queue offsets popped)
        self.order_info: list[str] | tuple = ()  # an orderly pop's (a list once it has some)
        self._rest = 0
        # the typed entry's (`store` given): (topic, queueId, pop offset) of each queue it did not read
        # (the pop was full), restNum's share of them counted when asked (`rest`), not per pop: the
        # local front's receive never asks (ReceiveMessage has no restNum). The wire's pop counts at once
        self.unread: list | None = [] if store is not None else None
        self._store = store
        self.blocked_until = 0  # orderly: the earliest time a blocked queue opens again (0: none)
        self.code: int | None = None
        self.remark: str | None = None

    @property
    def rest(self) -> int:
        """restNum: the messages left in the queues read, and in those it did not read (full)."""
        unread = self.unread
        if unread:
            store = self._store
            self._rest += sum(max(store.max_offset(t, q) - o, 0) for t, q, o in unread)
            unread.clear()
        return self._rest

    @rest.setter
    def rest(self, n: int) -> None:
        self._rest = n

    def start_offsets(self) -> dict[str, int]:
        """{"<retryFlag>@<queueId>": start offset}: startOffsetInfo as extra_info.parse_start_offset_info reads it."""
        starts = self.starts
        if len(starts) == 1:  # (the usual answer: one queue's records)
            t, q, o = starts[0]
            key = _QUEUE_KEYS.get((t, q))
            if key is None:
                key = _queue_key(t, q)
            return {key: o}
        return {ei.queue_key(t, q): o for t, q, o in starts}

    def order_count_info(self) -> str:
        return ";".join(self.order_info)


class PopMessageProcessor:
    def __init__(self, store, topics, holds, revive, order_info, long_polling: bool, suspend_max_ms: int,
                 groups=None, property_filter: bool = False):
        self.groups = groups  # SubscriptionGroupManager: consumeEnable
        self.property_filter = property_filter  # enablePropertyFilter: SQL92 filtering
        self.store = store
        self.topics = topics
        self.holds = holds
        self.revive = revive
        self.order_info = order_info
        self.long_polling = long_polling
        self.suspend_max_ms = suspend_max_ms
        self._checked: dict[tuple, tuple] = {}  # (topic, group, exp, expType) -> (retry topic, filter): _check
        self._orders: dict[tuple, tuple] = {}  # _queues' orders made

    def handlers(self) -> dict:
        return {codes.POP_MESSAGE: self.pop}

    def pop(self, cmd: RemotingCommand, conn):
        h = decode(PopMessageRequestHeader, cmd.ext)
        return self._pop(h, lambda popped: self._response(cmd, h, popped))

    def pop_values(self, group: str, topic: str, queue_id: int, max_nums: int, invisible_ms: int, poll_ms: int,
                   exp: str = "*", exp_type: str = "TAG", init_mode: int = INIT_MODE_MIN, order: bool = False,
                   attempt_id: str = ""):
        """POP_MESSAGE handed its request's fields as values (the local gRPC front's entry,
        broker.proxy.local_broker): a Popped, or a future of it while its revive records wait to
        be durable, or a coroutine of it when the pop is held (long polling). A refusal raises,
        as `pop` raises it for BrokerController.handle to answer."""
        h = PopMessageRequestHeader(group, topic, queue_id, max_nums, invisible_ms, poll_ms, 0, init_mode, exp_type,
                                    exp, order, attempt_id)
        return self._pop(h, _as_is, True)

    def _pop(self, h, finish, typed: bool = False):
        """The pop of `h` (the wire's header, or one made of the local front's values), its Popped
        handed to `finish` (the wire's response, or as it is) when it is answered."""
        if not self.revive.serving:  # (PopService refuses first; this guards a direct call)
            raise NotMaster(not_master_remark(self.store, "POP_MESSAGE"))
        topic, group, qid, order = h.topic, h.consumerGroup, h.queueId, h.order  # (each field read once)
        if not 0 < h.maxMsgNums <= MAX_POP_NUMS:
            raise InvalidParameter(f"maxMsgNums {h.maxMsgNums} must be 1..{MAX_POP_NUMS}")
        if h.invisibleTime <= 0:
            raise InvalidParameter(f"invisibleTime {h.invisibleTime} must be positive (ms)")
        if topic.startswith(REVIVE_TOPIC_PREFIX) or group == REVIVE_GROUP:
            raise NoPermission(f"{topic} / {group}: the revive log is the broker's own")
        groups = self.groups
        if groups is not None:
            group_cfg = groups.table.groups.get(group)  # (the usual case without a call)
            if group_cfg is None or not group_cfg.consumeEnable:
                groups.check_consumable(group)  # made on first use, or refused
        cfg = self.topics.table.topics.get(topic)  # (self.topics.get)
        if cfg is None:
            raise TopicNotExist(f"topic[{topic}] not exist, apply first please!")
        n = cfg.readQueueNums
        if qid >= n:
            raise InvalidParameter(f"queueId[{qid}] is illegal, topic:[{topic}] "
                                   f"topicConfig.readQueueNums:[{n}]")
        key = (topic, group, h.exp, h.expType)
        checked = self._checked.get(key)
        if checked is None:
            checked = self._check(key)
        retry, flt = checked
        # the order this pop reads the queues in (_order_of's): a random first one (or the one asked
        # for), the retry queue first in 20 % of pops; the same two draws a pop, the orders kept
        if qid >= 0:
            first, n = qid, -1  # (the one asked for)
        elif n == 1:
            first = 0
        else:
            first = int(_random() * n)  # random.randrange(n), without its argument checks
        key = (topic, retry, n, first, order, False if order else _random() < _RETRY_FIRST)
        queues = self._orders.get(key)
        if queues is None:
            queues = self._order_of(key)
        popped = self._pop_once(h, queues, flt, typed)
        if popped.count or h.pollTime <= 0 or not self.long_polling:
            return self._reply(popped, finish)
        deadline = time.monotonic() + min(h.pollTime, self.suspend_max_ms) / 1000
        return self._hold(h, queues, flt, deadline, finish, typed)

    def _check(self, key: tuple) -> tuple:
        """(the pop retry topic, the filter) of (topic, group, exp, expType), checked: a group that
        cannot name a retry topic is refused, as is a filter that does not parse. What passed is
        kept (the same request's checks give the same answer; enablePropertyFilter is fixed), so
        a receive does not run the regex and parse the expression again (bounded, as what the
        clients send is not: cleared when full, an expression past CHECKED_EXP_MAX not kept)."""
        topic, group, exp, exp_type = key
        retry = ei.pop_retry_topic(topic, group)
        check_topic_name(retry)
        checked = retry, pop_filter(exp, exp_type, self.property_filter)  # never an SQL92 or unknown type read as a tag
        if len(exp) <= CHECKED_EXP_MAX:
            if len(self._checked) >= CHECKED_MAX:
                self._checked.clear()
            self._checked[key] = checked
        return checked

    def _order_of(self, key: tuple) -> tuple[tuple[str, int], ...]:
        """(topic, queueId) in the order a pop reads them: the topic's queues from a random one
        (or the one asked for) and the pop retry topic's queue, first in 20% of pops. `key` is what
        _pop drew: (topic, retry topic, queue count or -1 for the one asked for, the first queue,
        order, retry first). The orders made are kept (bounded; read only by the pop and its
        hold): a pop draws its order, it does not build it."""
        topic, retry, n, first, order, retry_first = key
        if n < 0:
            own = [(topic, first)]
        else:
            own = [(topic, (first + i) % n) for i in range(n)]
        if not order:  # (an orderly pop reads no retry topic: a batch is redelivered from its queue)
            if retry_first:
                own.insert(0, (retry, 0))
            else:
                own.append((retry, 0))
        if len(self._orders) >= CHECKED_MAX:
            self._orders.clear()
        queues = self._orders[key] = tuple(own)
        return queues

    # -- one look at the queues -------------------------------------------------------------------
    def _pop_once(self, h, queues, flt, typed: bool = False) -> Popped:
        revive = self.revive
        if h.order:
            rq = ei.POP_ORDER_REVIVE_QUEUE
        else:  # (revive.next_revive_qid(), inline)
            rq = revive._next_qid = (revive._next_qid + 1) % revive.queue_num
        popped = Popped(int(_time() * 1000), rq, revive.log.appended, h.invisibleTime,  # (now_ms)
                        self.store if typed else None)
        topic_of_pop, topics, unread, max_nums = h.topic, self.topics.table.topics, popped.unread, h.maxMsgNums
        offsets = revive.pop_offsets
        group, query = h.consumerGroup, offsets.query
        kept_topic = kept = None  # the offset table's queues of (kept_topic, group), read once a topic
        for topic, queue_id in queues:
            if topic != topic_of_pop and topics.get(topic) is None:  # (TopicManager.get's table)
                continue  # no retry topic yet: nothing was ever revived for this group
            if unread is not None and popped.count >= max_nums:
                # the typed entry's queue not read (the pop is full): _pop_queue's first lines, inline
                # (its pop offset looked up, a new group's initialized; restNum counted if asked).
                # PopOffsets.query's usual case inline: nothing held ahead of the table, so the
                # table's offset, its topic@group key made and looked up once for the topic's queues
                if offsets._ahead:
                    offset = query(group, topic, queue_id)
                else:
                    if topic is not kept_topic:
                        kept_topic = topic
                        kept = offsets.store.consumer_offsets.table.get(f"{topic}@{group}")
                    offset = -1 if kept is None else kept.get(queue_id, -1)
                if offset < 0:
                    offset = self._pop_offset(group, topic, queue_id, h.initMode)
                    kept_topic = None  # (it may have made the topic's entry in the table)
                unread.append((topic, queue_id, offset))
                continue
            self._pop_queue(h, topic, queue_id, flt, popped)
        return popped

    def _pop_offset(self, group: str, topic: str, queue_id: int, init_mode: int) -> int:
        offsets = self.revive.pop_offsets
        offset = offsets.query(group, topic, queue_id)
        if offset >= 0:
            return offset
        lo = self.store.min_offset(topic, queue_id)
        if init_mode == INIT_MODE_MIN or topic.startswith(ei.RETRY_PREFIX) or lo <= 0:
            offset = lo  # (MAX: a queue still holding its first message is read from it, as pulls are)
        else:
            offset = max(self.store.max_offset(topic, queue_id) - 1, 0)
        offsets.advance(group, topic, queue_id, offset)
        return offset

    def _pop_queue(self, h, topic: str, queue_id: int, flt, popped: Popped) -> None:
        group = h.consumerGroup
        revive = self.revive
        pop_offsets = revive.pop_offsets
        # (_pop_offset's first look, inline; PopOffsets.query's usual case too: nothing held ahead of
        # the offset table, its offset read there)
        if pop_offsets._ahead:
            offset = pop_offsets.query(group, topic, queue_id)
        else:
            offset = pop_offsets.store.consumer_offsets.table.get(f"{topic}@{group}", _NO_OFFSETS).get(queue_id, -1)
        if offset < 0:
            offset = self._pop_offset(group, topic, queue_id, h.initMode)
        want = h.maxMsgNums - popped.count
        store = self.store
        if want <= 0:
            if popped.unread is not None:  # (the typed entry's: counted if asked, Popped.rest)
                popped.unread.append((topic, queue_id, offset))
            else:
                popped._rest += max(store.max_offset(topic, queue_id) - offset, 0)
            return
        if h.order:
            info = self.order_info.get(topic, group, queue_id)
            if self.order_info.check_block(topic, group, queue_id, popped.pop_time, h.attemptId):
                opens = info.pop_time + info.invisible_time
                popped.blocked_until = min(popped.blocked_until or opens, opens)
                return
        # merge: one view per run of records back to back in the log (the answer's body joins them
        # anyway), each record's queue offset still given. read_run: the records found as a tuple
        # (views, offsets, next offset, max offset), anything else as get's GetResult
        r = store.read_run(topic, queue_id, offset, want, MAX_TRANSFER_BYTES, flt.tags, flt.sql)
        if type(r) is tuple:
            views, offsets, nxt, hi = r
        else:
            if r.status in _MOVED:  # the offset left the queue (cleaned, or never valid): from where it is now
                offset = r.next_offset
                self.revive.pop_offsets.advance(group, topic, queue_id, offset)
                r = store.get(topic, queue_id, offset, want, MAX_TRANSFER_BYTES, flt.tags, sql=flt.sql, merge=True)
            offsets = r.queue_offsets
            if r.status != GetStatus.FOUND or not offsets:
                popped._rest += max(r.max_offset - r.next_offset, 0)
                if r.next_offset > offset and r.status == GetStatus.NO_MATCHED_MESSAGE:
                    self.revive.pop_offsets.advance(group, topic, queue_id, r.next_offset)  # filtered out
                return
            views, nxt, hi = r.messages, r.next_offset, r.max_offset
        if hi > nxt:
            popped._rest += hi - nxt
        n = len(offsets)
        if h.order:
            counts = self.order_info.update(topic, group, queue_id, popped.pop_time, h.invisibleTime, offsets,
                                            h.attemptId)
            info = popped.order_info
            if type(info) is tuple:
                info = popped.order_info = []
            for off, c in counts.items():
                info.append(ei.order_count_entry(topic, f"qo{queue_id}%{off}", c))
            info.append(ei.order_count_entry(topic, str(queue_id), min(counts.values())))
        else:
            # offsets rise: n of them ending at offset + n - 1 are every one from offset (nothing filtered)
            diffs = contiguous_diffs(n) if offsets[-1] - offset == n - 1 else [o - offset for o in offsets]
            put = revive.add_check_point_values(offset, popped.pop_time, h.invisibleTime, n, queue_id, topic, group,
                                                diffs, popped.revive_qid)
            # pops read past it now; the offset table (what followers copy) once the checkpoint is durable.
            # (PopOffsets.advance's usual case inline: no put to wait for and nothing held: the table now)
            if put is None and not pop_offsets._ahead:
                pop_offsets.store.consumer_offsets.raise_to(group, topic, queue_id, nxt)
            else:
                pop_offsets.advance(group, topic, queue_id, nxt, put)
        popped.starts.append((topic, queue_id, offset))
        popped.msgs.append((topic, queue_id, offsets))
        if popped.views:
            popped.views.extend(views)
        else:
            popped.views = views
        popped.count += n

    def _reply(self, popped: Popped, finish):
        """finish(popped) once the records this pop wrote are durable (a future of it until then);
        a record the store did not keep answers its status's code (pop_role.reply_when_durable's)."""
        put = self.revive.log.durable_since(popped.mark)
        if put is None:
            return popped if finish is _as_is else finish(popped)

        def answer(status, why):
            refused = not_kept(status, why)
            if refused is not None:
                popped.code, popped.remark = refused
            return finish(popped)
        return reply_when_put(put, answer)

    @staticmethod
    def _response(cmd, h, popped: Popped) -> RemotingCommand:
        if popped.code is not None:
            return cmd.response(popped.code, remark=popped.remark)
        ext = {"popTime": popped.pop_time, "invisibleTime": h.invisibleTime, "reviveQid": popped.revive_qid,
               "restNum": popped.rest,
               "startOffsetInfo": ";".join(ei.start_offset_entry(t, q, o) for t, q, o in popped.starts),
               "msgOffsetInfo": ";".join(ei.msg_offset_entry(t, q, offs) for t, q, offs in popped.msgs)}
        if h.order:
            ext["orderCountInfo"] = popped.order_count_info()
        if not popped.count:
            return cmd.response(codes.POLLING_TIMEOUT, ext, remark="NO_MESSAGE_IN_QUEUE")
        res = cmd.response(codes.SUCCESS, ext, popped.views, remark="FOUND")
        res.body_len = sum(len(v) for v in popped.views)
        return res

    # -- long polling -------------------------------------------------------------------------------
    async def _hold(self, h, queues, flt, deadline: float, finish, typed: bool = False):
        store, holds = self.store, self.holds
        while True:
            # registered in the same loop turn as the look that found nothing (see PullMessageProcessor._hold)
            end = max(store.queue_write_end(t, q) for t, q in queues)
            if end > store.dispatched():
                try:
                    await store.wait_dispatched(end, max(deadline - time.monotonic(), 1.0))
                except asyncio.TimeoutError:
                    pass
            if not self.revive.serving:  # no longer the master while held: nothing was written
                gone = Popped(0, 0, 0, h.invisibleTime)
                gone.code, gone.remark = codes.SLAVE_NOT_AVAILABLE, not_master_remark(self.store, "POP_MESSAGE")
                return finish(gone)
            popped = self._pop_once(h, queues, flt, typed)
            left = deadline - time.monotonic()
            if popped.count or left <= 0:
                reply = self._reply(popped, finish)
                return await reply if isinstance(reply, asyncio.Future) else reply
            if popped.blocked_until:  # an orderly batch's invisible time ends before the poll does
                left = min(left, max((popped.blocked_until - now_ms()) / 1000, 0.001))
            futs = [(t, q, holds.hold(t, q)) for t, q in queues]
            waits = [f for _, _, f in futs]
            grew = None
            if store.reads_dispatched_only:
                # DLedger mode: a send's notify comes before its entry is committed and dispatched
                # (the pop would look too early and sleep through it): every dispatch wakes the pop
                # to look again, as PullMessageProcessor._hold_on_slave wakes a held pull
                grew = asyncio.ensure_future(store.wait_dispatched(store.dispatched() + 1, left))
                waits.append(grew)
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t, q, f in futs:
                    holds.release(t, q, f)
                if grew is not None:
                    if not grew.done():
                        grew.cancel()
                    elif not grew.cancelled():
                        grew.exception()  # a timeout, retrieved: the deadline is checked above
            if any(f.cancelled() for _, _, f in futs):
                raise asyncio.CancelledError  # the broker is closing (PullHoldService.cancel_all)


def _as_is(popped: Popped) -> Popped:
    return popped
