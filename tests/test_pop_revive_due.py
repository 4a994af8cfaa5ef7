"""PopReviveService's due heap (what the revive loop sleeps on) holds about what is in flight:
an acked checkpoint's entry does not stay until its revive time, and an unacked one stays due."""
import heapq

from broker.server.pop.pop_revive_service import DUE_SLACK, PopReviveService
from broker.server.pop.revive_log import ReviveLog
from broker.store.config_files import ConsumerOffsetTable
from broker.store.pop_check_point import PopCheckPoint
from broker.store.results import PutResult, PutStatus


class _Store:
    """The revive log's store: appends counted per queue, nothing kept."""

    def __init__(self):
        self.consumer_offsets = ConsumerOffsetTable("/nonexistent")
        self.ends = [0] * 8

    def append(self, topic, queue_id, body, properties, lazy_dispatch=False):
        self.ends[queue_id] += 1
        return PutResult(PutStatus.PUT_OK, 0, self.ends[queue_id] - 1, 0, 0, b""), None

    def max_offset(self, topic, queue_id):
        return self.ends[queue_id]


def test_acked_checkpoints_leave_the_due_heap_and_unacked_ones_stay_due():
    svc = PopReviveService(_Store(), None, ReviveLog(_Store(), "C", 8), None, "broker-a", 16)
    svc.log.store = svc.store
    kept = PopCheckPoint(0, 1_000, 30_000, 1, 0, "T", "G", diffs=[0])  # never acked
    svc.add_check_point(kept, 1)
    for i in range(1, 5_000):
        ck = PopCheckPoint(i, 1_000 + i, 30_000, 2, 0, "T", "G", diffs=[0, 1])
        svc.add_check_point(ck, i % 8)
        if i % 1_000:
            svc.ack_many(ck, [1, 0])  # acked whole
        assert len(svc._due) <= 2 * len(svc.inflight) + DUE_SLACK + 1
    assert len(svc.inflight) == 1 + 4
    due = sorted(svc._due)
    live = [e for e in due if e[2] in svc.inflight]
    assert [e[0] for e in live] == [31_000, 32_000, 33_000, 34_000, 35_000]  # each still due at its time
    assert heapq.nsmallest(1, svc._due) == [svc._due[0]] and svc._due[0][0] == 31_000
