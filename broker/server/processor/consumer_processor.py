"""What a consumer group needs besides pulling (ClientManageProcessor, ConsumerManageProcessor,
SendMessageProcessor.consumerSendMsgBack): heartbeats, the client config check, member lists,
offsets, send-back, locks."""
from __future__ import annotations

import logging

import msgspec

from broker.remoting import codes
from broker.remoting.command import CommandError, RemotingCommand
from broker.remoting.headers import (ConsumerSendMsgBackRequestHeader, GetConsumerListByGroupRequestHeader,
                                     QueryConsumerOffsetRequestHeader, QueueHeader, SearchOffsetRequestHeader,
                                     UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader, decode)
from broker.server.filter.expression_type import check_client_config
from broker.server.processor.offset_search import offset_by_time, store_timestamp
from broker.server.client.rebalance_lock_manager import REBALANCE_LOCK_MAX_LIVE_TIME, RebalanceLockManager
from broker.remoting.refusals import BadRequest, NotFound
from broker.common.topic_validator import DLQ_PREFIX, RETRY_PREFIX, check_topic_name
from broker.server.subscription.subscription_group_manager import SubscriptionGroupNotExist
from broker.store.errors import StoreError
from broker.store.message import host_bytes
from broker.store.results import PutStatus

log = logging.getLogger("consumers")
_decode = msgspec.json.decode

_NOT_STORED = (PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.OS_PAGECACHE_BUSY, PutStatus.UNKNOWN_ERROR)


# Hostile input (issue 7): bodies of the wrong shape ({"consumerDataSet":[1]}, {"mqSet":{"a":1}},
# a queueId "x", JSON nested thousands deep) raised AttributeError/TypeError/RecursionError in
# the handlers: "internal error" and a traceback. They are checked here and refused as a bad
# request (SYSTEM_ERROR, remark naming the field), before anything is registered.
def _json_body(cmd: RemotingCommand, what: str) -> dict:
    try:
        data = _decode(bytes(cmd.body))
    except (msgspec.DecodeError, RecursionError) as e:
        raise CommandError(f"{what} body is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise CommandError(f"{what} body is not a JSON object")
    return data


def _objects(data: dict, key: str, where: str) -> list:
    items = data.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise CommandError(f"{where}{key} is not a list of objects")
    return items


def _check_heartbeat(data: dict) -> None:
    for i, cd in enumerate(_objects(data, "consumerDataSet", "")):
        if not isinstance(cd.get("groupName") or "", str):
            raise CommandError(f"consumerDataSet[{i}].groupName is not a string")
        for j, sd in enumerate(_objects(cd, "subscriptionDataSet", f"consumerDataSet[{i}].")):
            if not isinstance(sd.get("topic") or "", str) or not isinstance(sd.get("codeSet") or [], list):
                raise CommandError(f"consumerDataSet[{i}].subscriptionDataSet[{j}] has a topic that is not a string "
                                   f"or a codeSet that is not a list")
            if not isinstance(sd.get("expressionType") or "", str):
                raise CommandError(f"consumerDataSet[{i}].subscriptionDataSet[{j}].expressionType is not a string")
            try:
                [int(c) for c in sd.get("codeSet") or []]
            except (TypeError, ValueError):
                raise CommandError(f"consumerDataSet[{i}].subscriptionDataSet[{j}].codeSet holds a non-integer") from None
    for i, pd in enumerate(_objects(data, "producerDataSet", "")):
        if not isinstance(pd.get("groupName") or "", str):
            raise CommandError(f"producerDataSet[{i}].groupName is not a string")


def _mq_keys(body: dict) -> list:
    """(topic, queueId) of each entry of a LOCK/UNLOCK_BATCH_MQ body's mqSet, with the entry."""
    out = []
    for i, mq in enumerate(_objects(body, "mqSet", "")):
        try:
            out.append((str(mq.get("topic", "")), int(mq.get("queueId", -1)), mq))
        except (TypeError, ValueError):
            raise CommandError(f"mqSet[{i}].queueId is {mq.get('queueId')!r}, not an integer") from None
    return out



class ConsumerProcessor:
    def __init__(self, store, topics, consumers, holds, schedule, max_reconsume_times: int, producers=None,
                 lock_max_live_time: float = REBALANCE_LOCK_MAX_LIVE_TIME, groups=None,
                 property_filter: bool = False):
        self.store = store
        self.property_filter = property_filter  # enablePropertyFilter: SQL92 subscriptions compile
        self.topics = topics
        self.consumers = consumers
        self.producers = producers  # ProducerManager: the groups a transaction check can ask
        self.holds = holds
        self.schedule = schedule
        self.max_reconsume_times = max_reconsume_times
        self.groups = groups  # SubscriptionGroupManager: a group's retryMaxTimes
        self.locks = RebalanceLockManager(lock_max_live_time)

    def handlers(self) -> dict:
        return {codes.HEART_BEAT: self.heartbeat, codes.UNREGISTER_CLIENT: self.unregister,
                codes.CHECK_CLIENT_CONFIG: self.check_client_config,
                codes.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
                codes.QUERY_CONSUMER_OFFSET: self.query_offset, codes.UPDATE_CONSUMER_OFFSET: self.update_offset,
                codes.GET_MAX_OFFSET: self.max_offset, codes.GET_MIN_OFFSET: self.min_offset,
                codes.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
                codes.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
                codes.CONSUMER_SEND_MSG_BACK: self.send_back,
                codes.LOCK_BATCH_MQ: self.lock, codes.UNLOCK_BATCH_MQ: self.unlock}

    # -- membership ------------------------------------------------------------------------------
    def heartbeat(self, cmd: RemotingCommand, conn):
        data = _json_body(cmd, "heartbeat")
        _check_heartbeat(data)
        for cd in data.get("consumerDataSet") or []:  # a group that cannot name a retry topic: refused first
            if cd.get("groupName"):
                check_topic_name(RETRY_PREFIX + cd["groupName"])
        changed = self.consumers.heartbeat(data, conn)
        if conn is not None:  # what consumerConnection/producerConnection list for this client
            conn.attrs["client_language"], conn.attrs["client_version"] = cmd.language, cmd.version
        if self.producers is not None:
            self.producers.heartbeat(data, conn)
        for cd in data.get("consumerDataSet") or []:
            if cd.get("groupName"):
                if self.groups is not None:  # as RocketMQ's heartBeat: the group exists once its consumer beats
                    self.groups.find(cd["groupName"])
                self.topics.get_or_create(RETRY_PREFIX + cd["groupName"])  # as RocketMQ does on heartbeat
        for group in changed:
            self._notify_ids_changed(group)
        return cmd.response(codes.SUCCESS)

    def check_client_config(self, cmd: RemotingCommand, conn):
        """CHECK_CLIENT_CONFIG (46): the Java client asks before it subscribes by anything but tags
        (CheckClientRequestBody: clientId, group, subscriptionData): a TAG subscription passes, an
        SQL92 one if enablePropertyFilter is on and it compiles."""
        if not cmd.body:
            return cmd.response(codes.SUCCESS)
        sub = _json_body(cmd, "check client config").get("subscriptionData")
        if sub is not None and not isinstance(sub, dict):
            raise CommandError("subscriptionData is not a JSON object")
        if sub is not None and not isinstance(sub.get("expressionType") or "", str):
            raise CommandError("subscriptionData.expressionType is not a string")
        check_client_config(sub, self.property_filter)
        return cmd.response(codes.SUCCESS)

    def _notify_ids_changed(self, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED to every member, so they rebalance now (the Java and C++
        clients act on it; ali-ons ignores it and rebalances on its timer). The member that just
        joined is told too, as RocketMQ's ConsumerManager does: a Java DefaultLitePullConsumer does
        not rebalance when it starts, so this is what hands it its queues at its first heartbeat
        instead of at its rebalance timer, 20 s later."""
        g = self.consumers.groups.get(group)
        if not g:
            return
        for conn, _ in {id(cn): (cn, t) for cn, t in g.clients.values()}.values():
            if conn is not None and getattr(conn, "transport", None) is not None:
                conn.oneway(RemotingCommand.request(codes.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group},
                                                    oneway=True))

    def connection_closed(self, conn) -> None:
        """A member's connection closed (a consumer killed or gone): the rest of its group is told
        at once, as RocketMQ's ClientHousekeepingService does, instead of finding out at its next
        rebalance (20 s in the Java client), while the queues the member held are not consumed."""
        for group in self.consumers.connection_closed(conn):
            self._notify_ids_changed(group)

    def scan_expired(self) -> None:
        """Members silent for channelExpiredTimeout are dropped and the rest of their group told."""
        for group in self.consumers.scan_expired():
            self._notify_ids_changed(group)

    def unregister(self, cmd: RemotingCommand, conn):
        h = decode(UnregisterClientRequestHeader, cmd.ext)
        self.consumers.unregister(h.clientID, h.consumerGroup)
        if self.producers is not None and h.producerGroup:
            self.producers.unregister(h.clientID, h.producerGroup)
        if h.consumerGroup:
            self._notify_ids_changed(h.consumerGroup)
        return cmd.response(codes.SUCCESS)

    def consumer_list(self, cmd: RemotingCommand, conn):
        group = decode(GetConsumerListByGroupRequestHeader, cmd.ext).consumerGroup
        ids = self.consumers.client_ids(group)
        if not ids:
            raise BadRequest(f"no consumer for this group, {group}")
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode({"consumerIdList": ids}))

    # -- offsets ---------------------------------------------------------------------------------
    def query_offset(self, cmd: RemotingCommand, conn):
        h = decode(QueryConsumerOffsetRequestHeader, cmd.ext)
        offset = self.store.consumer_offsets.query(h.consumerGroup, h.topic, h.queueId)
        if offset >= 0:
            return cmd.response(codes.SUCCESS, {"offset": offset})
        # Nothing committed: a queue that still holds its first message is read from 0, so what was
        # produced before the group's first start is consumed (ConsumerManageProcessor). A queue
        # with no message 0 (empty, or its head cleaned) is QUERY_NOT_FOUND, as RocketMQ's. A
        # message appended but not yet in the consume queue counts: the answer is not a race
        # with the dispatch.
        store = self.store
        if store.min_offset(h.topic, h.queueId) <= 0 and (store.max_offset(h.topic, h.queueId) > 0
                                                         or store.queue_write_end(h.topic, h.queueId) > 0):
            return cmd.response(codes.SUCCESS, {"offset": 0})
        raise NotFound("Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_offset(self, cmd: RemotingCommand, conn):
        h = decode(UpdateConsumerOffsetRequestHeader, cmd.ext)
        if h.commitOffset >= 0:  # ali-ons may send -1 for a queue it has not consumed
            self.store.consumer_offsets.commit(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        return cmd.response(codes.SUCCESS)

    def max_offset(self, cmd: RemotingCommand, conn):
        h = decode(QueueHeader, cmd.ext)
        return cmd.response(codes.SUCCESS, {"offset": self.store.max_offset(h.topic, h.queueId)})

    def min_offset(self, cmd: RemotingCommand, conn):
        h = decode(QueueHeader, cmd.ext)
        return cmd.response(codes.SUCCESS, {"offset": self.store.min_offset(h.topic, h.queueId)})

    def earliest_store_time(self, cmd: RemotingCommand, conn):
        """GET_EARLIEST_MSG_STORETIME (the Java client's earliestMsgStoreTime): when the queue's
        first message still held was stored; -1 for an empty queue, as RocketMQ's store answers."""
        h = decode(QueueHeader, cmd.ext)
        r = self.store.get(h.topic, h.queueId, self.store.min_offset(h.topic, h.queueId), 1)
        try:
            stored_at = store_timestamp(r.messages[0]) if r.messages else -1
        finally:
            r.release()
        return cmd.response(codes.SUCCESS, {"timestamp": stored_at})

    def search_offset(self, cmd: RemotingCommand, conn):
        """The first queue offset whose message was stored at or after `timestamp`."""
        h = decode(SearchOffsetRequestHeader, cmd.ext)
        return cmd.response(codes.SUCCESS, {"offset": offset_by_time(self.store, h.topic, h.queueId, h.timestamp)})

    # -- retry -----------------------------------------------------------------------------------
    def send_back(self, cmd: RemotingCommand, conn):
        """A consumer failed a message: store a copy for redelivery in %RETRY%<group>, or in
        %DLQ%<group> once it has been retried maxReconsumeTimes (or delayLevel < 0)."""
        h = decode(ConsumerSendMsgBackRequestHeader, cmd.ext)
        group, phys, delay_level = h.group, h.offset, h.delayLevel
        if self.groups is not None and self.groups.find(group) is None:  # created on first use, or refused
            raise SubscriptionGroupNotExist(f"subscription group not exist, {group}")
        try:
            msg = self.store.lookup(phys)
        except StoreError as e:
            raise BadRequest(f"look message by offset failed, {phys}: {e}") from None
        props = dict(msg.properties)
        props.setdefault("RETRY_TOPIC", msg.topic)
        # as Java's: the first failure's id sticks through every retry; the request's originMsgId
        # (the client's idea of it) is not trusted over what the stored copy carries
        props["ORIGIN_MESSAGE_ID"] = props.get("ORIGIN_MESSAGE_ID") or msg.msg_id
        if h.maxReconsumeTimes is not None:  # the client's own (RocketMQ: over the group's)
            max_times = h.maxReconsumeTimes
        elif self.groups is not None:
            max_times = self.groups.retry_max_times(group)
        else:
            max_times = self.max_reconsume_times
        if msg.reconsume_times >= max_times or delay_level < 0:
            topic = DLQ_PREFIX + group
            props.pop("DELAY", None)
        else:
            topic = RETRY_PREFIX + group
        self.topics.get_or_create(topic)
        queue_id, level = 0, 0
        if topic.startswith(RETRY_PREFIX):
            # redelivered after a delay: the level asked for, or 3 + reconsumeTimes ("server decides")
            schedule = self.schedule
            level = min(delay_level if delay_level > 0 else 3 + msg.reconsume_times, schedule.max_level)
            topic, queue_id, props = schedule.divert(topic, 0, props, level)
        result, flushed = self.store.append(
            topic, queue_id, msg.body, props, flag=msg.flag, sys_flag=msg.sys_flag,
            born_timestamp=msg.born_timestamp, born_host=host_bytes(msg.born_host),
            reconsume_times=msg.reconsume_times + 1)
        if level:
            self.schedule.arrived(level)
        else:
            self.holds.notify(topic, queue_id, result.end_offset)
        log.info("send back %s of %s to %s (reconsumeTimes %d)", msg.msg_id, group, topic, msg.reconsume_times + 1)
        if flushed is None:
            return cmd.response(codes.SUCCESS)
        return self._after_flush(cmd, flushed)

    async def _after_flush(self, cmd, flushed):
        status = await flushed
        if status in _NOT_STORED:  # DLedger mode: no quorum (RocketMQ answers SYSTEM_ERROR, the status named)
            return cmd.response(codes.SYSTEM_ERROR, remark=status.name)
        return cmd.response(codes.SUCCESS)

    # -- orderly consumption -----------------------------------------------------------------------
    def lock(self, cmd: RemotingCommand, conn):
        """LOCK_BATCH_MQ: the queues of the body's mqSet now locked to its clientId (lockOKMQSet)."""
        body = _json_body(cmd, "lock")
        group, client = str(body.get("consumerGroup", "")), str(body.get("clientId", ""))
        entries = {(topic, queue_id): mq for topic, queue_id, mq in _mq_keys(body)}
        granted = self.locks.try_lock_batch(group, list(entries), client)
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode({"lockOKMQSet": [entries[k] for k in granted]}))

    def unlock(self, cmd: RemotingCommand, conn):
        body = _json_body(cmd, "unlock")
        group, client = str(body.get("consumerGroup", "")), str(body.get("clientId", ""))
        self.locks.unlock_batch(group, [(topic, queue_id) for topic, queue_id, _ in _mq_keys(body)], client)
        return cmd.response(codes.SUCCESS)
