"""AdminBrokerProcessor.resetOffset (INVOKE_BROKER_TO_RESET_OFFSET; mqadmin resetOffsetByTime), as
RocketMQ's Broker2Client.resetOffset: each queue's offset at the timestamp (-1: its end), sent to
every online member of the group as RESET_CONSUMER_CLIENT_OFFSET, which moves its consumer there.
A group with no member online is answered CONSUMER_NOT_ONLINE; mqadmin then commits the offsets
itself (UPDATE_CONSUMER_OFFSET), as it does against RocketMQ."""
from __future__ import annotations

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import ResetOffsetRequestHeader, decode
from broker.remoting.refusals import BadRequest, TopicNotExist
from broker.server.processor.connection_list_processor import ConsumerNotOnline
from broker.server.processor.offset_search import offset_by_time
from broker.server.processor.stats_processor import mq_keyed_json


class ResetOffsetProcessor:
    def __init__(self, store, topics, consumers, broker_name: str):
        self.store = store
        self.topics = topics
        self.consumers = consumers
        self.broker_name = broker_name

    def handlers(self) -> dict:
        return {codes.INVOKE_BROKER_TO_RESET_OFFSET: self.reset}

    def reset(self, cmd: RemotingCommand, conn):
        h = decode(ResetOffsetRequestHeader, cmd.ext)
        cfg = self.topics.get(h.topic)
        if cfg is None:
            raise TopicNotExist(f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}")
        table = {}
        for qid in range(cfg.writeQueueNums):
            consumer_offset = self.store.consumer_offsets.query(h.group, h.topic, qid)
            if consumer_offset == -1:
                raise BadRequest(f"THe consumer group <{h.group}> not exist")
            target = (self.store.max_offset(h.topic, qid) if h.timestamp == -1
                      else offset_by_time(self.store, h.topic, qid, h.timestamp))
            target = max(target, 0)
            table[(h.topic, self.broker_name, qid)] = target if h.isForce or target < consumer_offset else consumer_offset
        info = self.consumers.groups.get(h.group)
        members = [] if info is None else [c for c, _ in info.clients.values()
                                          if c is not None and getattr(c, "transport", None) is not None]
        if not members:
            raise ConsumerNotOnline(f"Consumer not online, so can not reset offset, Group: {h.group} "
                                    f"Topic: {h.topic} Timestamp: {h.timestamp}")
        body = mq_keyed_json({}, "offsetTable", table)
        for member in {id(c): c for c in members}.values():
            member.oneway(RemotingCommand.request(codes.RESET_CONSUMER_CLIENT_OFFSET,
                                                  {"topic": h.topic, "group": h.group, "timestamp": str(h.timestamp)},
                                                  body, oneway=True))
        return cmd.response(codes.SUCCESS, body=body)
