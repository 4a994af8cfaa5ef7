"""QueueReader.max_offset's search for the first consume-queue entry the reput has not dispatched
(broker.services.queue_reader.first_undispatched): the same index as a scan from the start, for
any dispatched prefix, with few entries read when the undispatched tail is short."""
from hypothesis import given
from hypothesis import strategies as st

from broker.services.queue_reader import first_undispatched


def queue(n: int, done: int, holes: int):
    """Entries 0..n-1 of 100 bytes each; the first `done` dispatched; `holes` of the rest not
    written yet (None), the others written past the dispatched position."""
    entries = [(i * 100, 100) for i in range(n)]
    for i in range(done, min(n, done + holes)):
        entries[i] = None
    return entries, done * 100  # the dispatched position: the end of entry done - 1


@given(st.integers(0, 300), st.data())
def test_the_first_undispatched_entry_as_a_scan_finds_it(n, data):
    done = data.draw(st.integers(0, n))
    lo = data.draw(st.integers(0, done))
    entries, dispatched = queue(n, done, data.draw(st.integers(0, 5)))
    got = first_undispatched(entries.__getitem__, lo, n, dispatched)
    assert got == next((i for i in range(lo, n) if entries[i] is None or entries[i][0] + 100 > dispatched), n)


def test_a_short_tail_reads_few_entries():
    entries, dispatched = queue(1_000_000, 1_000_000 - 3, 0)
    reads = []
    got = first_undispatched(lambda i: reads.append(i) or entries[i], 0, len(entries), dispatched)
    assert got == 1_000_000 - 3 and len(reads) <= 6
