"""AdminBrokerProcessor: topic creation, topic config, message view by id, runtime info."""
from __future__ import annotations

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.topic_manager import TopicError
from broker.store.config_files import TopicConfig
from broker.store.errors import StoreError


class AdminProcessor:
    def __init__(self, controller):
        self.c = controller
        self.store = controller.store

    def handlers(self) -> dict:
        return {codes.UPDATE_AND_CREATE_TOPIC: self.create_topic, codes.GET_ALL_TOPIC_CONFIG: self.all_topics,
                codes.VIEW_MESSAGE_BY_ID: self.view_message, codes.GET_BROKER_RUNTIME_INFO: self.runtime_info,
                codes.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
                codes.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
                codes.DELETE_EXPIRED_COMMITLOG: self.delete_expired}

    def create_topic(self, cmd: RemotingCommand, conn):
        try:
            cfg = TopicConfig(cmd.get_str("topic"), cmd.get_int("readQueueNums", 4), cmd.get_int("writeQueueNums", 4),
                              cmd.get_int("perm", 6), cmd.get_str("topicFilterType", "SINGLE_TAG"),
                              cmd.get_int("topicSysFlag", 0), cmd.get_bool("order", False))
            if not (0 < cfg.readQueueNums <= 1024 and 0 < cfg.writeQueueNums <= 1024):
                raise TopicError("queue numbers must be 1..1024")
            self.c.topics.create(cfg)
        except TopicError as e:
            return cmd.response(codes.SYSTEM_ERROR, remark=str(e))
        return cmd.response(codes.SUCCESS)

    def all_topics(self, cmd: RemotingCommand, conn):
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(self.c.topics.serialize_wrapper()))

    def all_consumer_offsets(self, cmd: RemotingCommand, conn):
        """ConsumerOffsetManager's table, for a slave's SlaveSynchronize (and admin tools)."""
        table = {k: {str(q): o for q, o in v.items()} for k, v in self.store.consumer_offsets.table.items()}
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode({"offsetTable": table}))

    def all_delay_offsets(self, cmd: RemotingCommand, conn):
        offsets = self.c.schedule.offsets if self.c.schedule is not None else {}
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(
            {"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}))

    def delete_expired(self, cmd: RemotingCommand, conn):
        """`broker admin clean` / mqadmin deleteExpiredCommitLog: expired files go now."""
        self.store.request_clean()
        return cmd.response(codes.SUCCESS)

    def view_message(self, cmd: RemotingCommand, conn):
        """The stored record at a physical offset (the offset half of an offsetMsgId)."""
        phys = cmd.get_int("offset")
        try:
            view = self.store.record_view(phys)
            self.store.lookup(phys)  # the record must decode whole, not just have a size word
        except StoreError as e:
            return cmd.response(codes.SYSTEM_ERROR, remark=str(e))
        return cmd.response(codes.SUCCESS, body=view)

    def runtime_info(self, cmd: RemotingCommand, conn):
        o = self.store.offsets()
        table = {"brokerVersionDesc": "V4_9_4", "brokerRole": self.store.config.brokerRole,
                 "commitLogMinOffset": o["min"], "commitLogMaxOffset": o["wrote"], "flushedOffset": o["flushed"],
                 "dispatchedOffset": o["dispatched"], "putMessageEntireTimeMax": 0,
                 "pullHeldRequests": self.c.holds.held(), "topics": len(self.c.topics.table.topics)}
        table.update({k: o[k] for k in ("acked", "slaves", "received", "linked") if k in o})
        # the same figures /metrics serves (broker.remoting.metrics)
        table.update({k: (int(v) if float(v).is_integer() else round(v, 6)) for k, v in self.c.metrics.snapshot().items()})
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode({"table": {k: str(v) for k, v in table.items()}}))
