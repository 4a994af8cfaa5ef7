"""QUERY_MESSAGE's store side (RocketMQ's DefaultMessageStore.queryMessage): the index gives
commit-log offsets of a key's messages within a time range, and each is answered as a view of
its stored record (no copy). Messages deleted since they were indexed (expired segments) are
left out, as RocketMQ leaves out what it cannot read."""
from __future__ import annotations

from dataclasses import dataclass, field

from broker.store.errors import ServiceUnavailable, StoreError
from broker.store.index_service import IndexService


@dataclass
class QueryMessageResult:
    messages: list[memoryview] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


class MessageQuery:
    def __init__(self, store):
        self.store = store
        self.config = store.config
        self.index = IndexService(store.config)

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryMessageResult:
        if not self.config.messageIndexEnable:
            raise ServiceUnavailable("this broker keeps no message index (messageIndexEnable=false)")
        r = self.index.query_offset(topic, key, min(max_num, self.config.maxMsgsNumBatch), begin, end)
        out = QueryMessageResult(index_last_update_timestamp=r.index_last_update_timestamp,
                                 index_last_update_phyoffset=r.index_last_update_phyoffset)
        for phys in sorted(set(r.phy_offsets)):
            try:
                out.messages.append(self.store.record_view(phys))
            except StoreError:
                continue
        return out

    def close(self) -> None:
        self.index.close()
