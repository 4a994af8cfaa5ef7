"""PopReviveService's due heap (what the revive loop sleeps on) holds about what is in flight:
an acked checkpoint's entry does not stay until its revive time, and an unacked one stays due.
ReviveLog's live positions give the lowest one held (the revive offset) as min() would."""
import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.server.pop.pop_revive_service import DUE_SLACK, PopReviveService
from broker.server.pop.revive_log import LivePositions, ReviveLog
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

    def append_record(self, topic, queue_id, body, properties):  # (MessageStore.append_record: the revive log's)
        r, fut = self.append(topic, queue_id, body, properties, lazy_dispatch=True)
        return r.queue_offset, fut

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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3000)), max_size=400))
def test_live_positions_lowest_is_the_lowest_held_and_not_let_go(ops):
    """ReviveLog's live positions of a queue: held mostly ascending (as appended), sometimes not,
    let go in any order (discard, or discard_low); the lowest is always min() of what is held, through
    the order's compaction."""
    lp, model, nxt = LivePositions(), set(), 0
    for hold, pos in ops:
        if hold:
            pos = nxt if pos % 5 else pos  # ascending, with one out of order now and then
            nxt += 1
            lp.add(pos)
            model.add(pos)
        else:
            victim = sorted(model)[pos % len(model)] if model and pos % 7 else pos
            model.discard(victim)
            if pos % 2:  # (the batch ack's release: discard_low, the two in one call)
                assert lp.discard_low(victim) == (min(model) if model else None)
            else:
                lp.discard(victim)
        assert lp.low() == (min(model) if model else None)
        assert len(lp) == len(model)


def test_live_positions_forget_what_was_let_go_behind_a_long_lived_lowest():
    lp = LivePositions()
    lp.add(0)  # held all along
    for pos in range(1, 20_000):
        lp.add(pos)
        lp.discard(pos)
        assert lp.low() == 0
    assert len(lp._order) <= 2 * len(lp) + 1024 + 1
