"""A DLedger leader SIGSTOPped (not killed) for longer than the election timeout, then SIGCONT:
the other two elect a leader meanwhile; the frozen one wakes up still believing it leads, with
client sends queued on its sockets. It must acknowledge none of them (it cannot commit in a term
the majority has left), step down, refuse sends naming the new leader, and rejoin as a follower.
Nothing acknowledged on either side is lost or stored twice (issue 17's test list)."""
from __future__ import annotations

import time

from tests.conftest import wait_for
from tests.helpers.dledger_checks import check_history
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.dledger_senders import sending


def test_frozen_leader_resumes_acknowledges_nothing_and_rejoins_as_follower(tmp_path):
    with sending(DLedgerGroup(tmp_path)) as (g, sender):
        old = g.leader()
        others = [b for b in g.brokers.values() if b is not old]
        routed = sender("route")
        routed.wait_acked(20)
        # a timeout longer than the freeze: these sends are still waiting when it resumes
        straight = sender("old", to=old, timeout=20)
        straight.wait_acked(5)

        g.freeze(old)
        frozen_at = time.monotonic()
        new = g.leader(among=others, timeout=30)
        elected_at = time.monotonic()
        routed.wait_acked(20, since=elected_at)
        g.thaw(old)

        g.wait_follows(old, new)
        assert old.info()["brokerRole"] == "SLAVE"
        # the sends queued while it was frozen are answered now, none of them SEND_OK: those it had
        # appended as leader fail TERM_CHANGED (how many depends on the machine's load), and once it
        # follows, a send is refused naming the new leader
        def names_the_leader(remark: str) -> bool:
            return "code 14" in remark and f"the leader is {new.name}" in remark
        wait_for(lambda: any(names_the_leader(r) for _, r in straight.remarks), 30,
                 f"a send to {old.name} refused naming {new.name} (refusals: {straight.remarks[-3:]})")
        assert straight.acked_since(frozen_at) == [], "the resumed leader acknowledged a write it cannot commit"
        straight.stop()
        routed.wait_acked(10, since=time.monotonic())
        routed.stop()
        check_history(g, routed.acked_bodies + straight.acked_bodies, routed.tried + straight.tried,
                      members=list(g.brokers.values()))
