"""AckMessageProcessor.ack_batches with its batches acked by one kernel call
(PopReviveService.ack_offsets, broker.kernels.batch_ack) against the path it replaced (the kernel
declining: _head, _ack_checkpoint, find, ack_many): on the same checkpoints and the same batches,
the same answer (what was not acked, each named alike), the same revive-log records (bodies,
TAGS, UNIQ_KEY, queues), the same bitmaps and the same checkpoints finished and released."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from broker.server.pop import pop_revive_service as prs
from broker.server.pop.pop_revive_service import PopReviveService
from broker.server.pop.revive_log import ReviveLog
from broker.server.processor.ack_message_processor import AckMessageProcessor
from broker.store.pop_check_point import PopCheckPoint
from tests.test_pop_check_point_json import _RecordingStore

TOPIC, GROUP, PT = "T", "G", 1_700_000_000_000


class _Store(_RecordingStore):
    """The recording store with one topic's queue bounds (queue_range's)."""
    lo, hi = 5, 400

    def min_offset(self, topic, queue_id):
        return self.lo

    def max_offset(self, topic, queue_id):
        return self.hi if topic == TOPIC else len(self.records)


class _Topics:
    class _Cfg:
        readQueueNums = 4

    def get(self, topic):
        return self._Cfg if topic == TOPIC else None


class _NoOrderly:
    """No orderly batch out (an orderly handle's ack is answered NotInFlight on both paths)."""

    def commit_and_next(self, *args):
        return -1


def _broker(checkpoints):
    store = _Store()
    svc = PopReviveService(store, _Topics(), ReviveLog(store, "DefaultCluster", 8), None, "broker-a", 16)
    for so, diffs, num, q in checkpoints:
        svc.add_check_point(PopCheckPoint(so, PT, 30_000, num, q, TOPIC, GROUP, diffs=list(diffs)), so % 8)
    return store, svc, AckMessageProcessor(store, _Topics(), None, svc, _NoOrderly())


@st.composite
def scenarios(draw):
    cks, used = [], set()
    for _ in range(draw(st.integers(1, 3))):
        so = draw(st.integers(0, 300).filter(lambda s: s not in used))
        used.add(so)
        kind = draw(st.sampled_from(["range", "rising", "old", "odd"]))
        n = draw(st.integers(1, 32))
        diffs = (list(range(n)) if kind == "range" else [] if kind == "old"
                 else sorted(draw(st.sets(st.integers(0, 60), min_size=n, max_size=n))) if kind == "rising"
                 else draw(st.lists(st.integers(0, 20), min_size=n, max_size=n)))
        cks.append((so, diffs, n, draw(st.integers(0, 3))))
    batches = []
    for _ in range(draw(st.integers(1, 6))):
        so, diffs, num, q = draw(st.sampled_from(cks))
        popped = [so + d for d in diffs] if diffs else [so + i for i in range(num)]
        offsets = draw(st.lists(st.one_of(st.sampled_from(popped), st.integers(0, 420)), min_size=1, max_size=34))
        rq = so % 8 if draw(st.integers(0, 9)) else draw(st.sampled_from([0, 7, 999]))
        batches.append((GROUP, TOPIC if draw(st.integers(0, 20)) else "Other", draw(st.sampled_from([q, q, q, 9])),
                        so if draw(st.integers(0, 15)) else so + 1, rq, PT, sorted(set(offsets))))
    return cks, batches


@settings(max_examples=400, deadline=None)
@given(scenarios())
def test_kernel_acks_as_the_python_path(scenario):
    cks, batches = scenario
    fast = _broker(cks)
    slow = _broker(cks)
    real = prs.ack_record
    for b in batches:
        got_fast = fast[2].ack_batches([b])
        prs.ack_record = lambda *a: None  # the kernel declines: the path before it
        try:
            got_slow = slow[2].ack_batches([b])
        finally:
            prs.ack_record = real
        assert got_fast == got_slow
        assert fast[0].records == slow[0].records
        assert {k: ck.bitmap for k, ck in fast[1].inflight.items()} == \
            {k: ck.bitmap for k, ck in slow[1].inflight.items()}
        assert fast[0].consumer_offsets.table == slow[0].consumer_offsets.table
