"""QueryMessageProcessor: messages by key (QUERY_MESSAGE, through the index) and by commit-log
offset (VIEW_MESSAGE_BY_ID, the offset half of an offsetMsgId), as RocketMQ's processor of the
same name answers them: the stored records themselves as the body, zero-copy views of the log."""
from __future__ import annotations

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import UNIQUE_MSG_QUERY_FLAG, QueryMessageRequestHeader, ViewMessageRequestHeader, decode
from broker.remoting.refusals import BadRequest, NotFound



class QueryMessageProcessor:
    def __init__(self, store):
        self.store = store

    def handlers(self) -> dict:
        return {codes.QUERY_MESSAGE: self.query_message, codes.VIEW_MESSAGE_BY_ID: self.view_message}

    def query_message(self, cmd: RemotingCommand, conn):
        h = decode(QueryMessageRequestHeader, cmd.ext)
        if not h.topic:
            raise BadRequest("the request has an empty topic")
        if not h.key:
            raise BadRequest("the request has an empty key")
        max_num = h.maxNum
        if str(cmd.ext.get(UNIQUE_MSG_QUERY_FLAG, "")).lower() == "true":
            max_num = self.store.config.defaultQueryMaxNum  # as RocketMQ: a msgId query ignores maxNum
        elif max_num <= 0:
            raise BadRequest(f"maxNum is {h.maxNum}: it must be at least 1")
        if h.beginTimestamp > h.endTimestamp:
            raise BadRequest(f"beginTimestamp {h.beginTimestamp} is after endTimestamp {h.endTimestamp}")
        res = self.store.query_message(h.topic, h.key, max_num, h.beginTimestamp, h.endTimestamp)
        ext = {"indexLastUpdateTimestamp": str(res.index_last_update_timestamp),
               "indexLastUpdatePhyoffset": str(res.index_last_update_phyoffset)}
        if not res.messages:
            return cmd.response(codes.QUERY_NOT_FOUND, ext, remark="can not find message, maybe time range not correct")
        return cmd.response(codes.SUCCESS, ext, body=res.messages)

    def view_message(self, cmd: RemotingCommand, conn):
        """The stored record at a physical offset (the offset half of an offsetMsgId)."""
        phys = decode(ViewMessageRequestHeader, cmd.ext).offset
        view = self.store.record_view(phys)  # StoreError: SYSTEM_ERROR naming the offset
        self.store.lookup(phys)  # the record must decode whole, not just have a size word
        return cmd.response(codes.SUCCESS, body=view)
