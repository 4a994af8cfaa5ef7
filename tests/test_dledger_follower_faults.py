"""A DLedger follower lost while the group takes writes (issue 17's test list): the leader keeps
its quorum with the other follower, so sends go on being acknowledged with no pause beyond what
one retry would cover, and the follower, once back, catches up from the leader:

- killed with -9 and restarted: it recovers its own log and is pushed the rest;
- stopped, its store directory removed, restarted: it is rebuilt from the leader's entries from
  index 0, ending with the same DLedger data and index files (decoded by the independent twin)
  and the same consume queues."""
from __future__ import annotations

import time

import pytest

from tests.helpers.dledger_checks import check_history
from tests.helpers.dledger_cluster import SEGMENT, DLedgerGroup, data_dir
from tests.helpers.dledger_senders import sending
from tests.twins.dledger_twin import walk_data, walk_index

WORKERS = 4
# the longest a send may wait for its SEND_OK while a follower is lost: one maxWaitAckTimeMs
# (2.5 s, what a retry would wait), never an outage
MAX_GAP_S = 2.5


def _max_gap(began: list[float]) -> float:
    began = sorted(began)
    return max((b - a for a, b in zip(began, began[1:])), default=0.0)


def _ledger(b) -> tuple[list, list]:
    """A member's DLedger log as the twin reads it: its entries and index units."""
    d = data_dir(b)
    walk = walk_data(str(d), SEGMENT)
    entries = [(e.index, e.term, e.pos, e.channel, e.chain_crc, e.body_crc, e.body) for e in walk.entries]
    # index files: DLedger's default size (the broker leaves mappedFileSizeForEntryIndex alone)
    index = walk_index(str(d.parent / "index"), _index_file_size(d.parent / "index"))
    return entries, [(u.magic, u.pos, u.size, u.index, u.term) for u in index]


def _index_file_size(d) -> int:
    return next(p.stat().st_size for p in sorted(d.iterdir()) if p.name.isdigit())


def _data_bytes(b, end: int) -> bytes:
    """The data files' bytes up to the log's end (past it: zeros, or files prepared ahead)."""
    files = sorted(p for p in data_dir(b).iterdir() if p.name.isdigit() and int(p.name) < end)
    return b"".join(p.read_bytes() for p in files)[:end - int(files[0].name)]


@pytest.mark.parametrize("fault", ["kill9", "wipe"])
def test_follower_lost_and_back_keeps_sends_flowing_and_catches_up(tmp_path, fault):
    with sending(DLedgerGroup(tmp_path)) as (g, sender):
        leader = g.leader()
        follower = next(b for b in g.brokers.values() if b is not leader)
        routed = sender("route", workers=WORKERS)
        routed.wait_acked(100)

        lost_at = time.monotonic()
        if fault == "kill9":
            follower.kill9()
        else:
            follower.stop()
            g.wipe(follower)
            assert not follower.store.exists()
        routed.wait_acked(100, since=lost_at)
        back_at = time.monotonic()
        follower.start()
        g.wait_follows(follower, leader)
        routed.wait_acked(100, since=back_at)
        routed.stop()

        during = [t for t, _ in routed.acked if t >= lost_at - 1]
        assert _max_gap(during) < MAX_GAP_S, f"sends paused {_max_gap(during):.2f} s while {follower.name} was lost"
        assert len(routed.remarks) <= WORKERS, f"more failures than one per sender: {routed.remarks}"
        assert g.wait_master("TDL") is leader
        check_history(g, routed.acked_bodies, routed.tried, members=list(g.brokers.values()))
        # the follower's DLedger files equal the leader's, entry for entry and byte for byte
        theirs, mine = _ledger(leader), _ledger(follower)
        assert mine == theirs
        end = walk_data(str(data_dir(leader)), SEGMENT).end
        assert _data_bytes(follower, end) == _data_bytes(leader, end)
