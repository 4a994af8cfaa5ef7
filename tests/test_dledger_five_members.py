"""A DLedger group of five (issue 17's test list): a majority is three. With the leader and a
follower killed the other three elect a leader and commit; with a third member killed the two
left can commit nothing (every send, routed or straight to either of them, fails or times out,
never SEND_OK, and a leader among them steps down); once one member returns the group elects
and takes writes again, and every member ends with the same consume queues and every
acknowledged message once."""
from __future__ import annotations

import time

from tests.conftest import wait_for
from tests.helpers.dledger_checks import TOPIC, check_history
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.dledger_senders import sending

# sends to the two survivors are watched this long: past maxWaitAckTimeMs (2.5 s), so an append
# that waited for a quorum has had the time to fail rather than be acknowledged
NO_QUORUM_WATCH_S = 3.0


def test_five_members_commit_with_three_and_never_with_two(tmp_path):
    with sending(DLedgerGroup(tmp_path, n=5)) as (g, sender):
        first = g.leader()
        routed = sender("route")
        routed.wait_acked(20)

        # the leader and one follower die: three of five are a majority
        followers = [b for b in g.brokers.values() if b is not first]
        first.kill9()
        followers[0].kill9()
        second = g.wait_master(TOPIC, timeout=30)
        routed.wait_acked(20, since=time.monotonic())

        # one more dies: two of five commit nothing
        third = next(b for b in g.alive() if b is not second)
        third.kill9()
        lost_quorum_at = time.monotonic()
        left = g.alive()
        assert len(left) == 2 and second in left
        straight = [sender(f"to-{b.name}", to=b) for b in left]
        wait_for(lambda: second.info()["dLedgerRole"] != "LEADER", 10, f"{second.name} to step down")
        watch_until = time.monotonic() + NO_QUORUM_WATCH_S
        wait_for(lambda: time.monotonic() >= watch_until and all(len(s.remarks) >= 3 for s in straight),
                 NO_QUORUM_WATCH_S + 20, "sends to the two survivors to fail")
        for s in [routed, *straight]:
            assert s.acked_since(lost_quorum_at) == [], f"{s.tag}: SEND_OK without a majority"
        for s in straight:
            s.stop()
        assert all(b.info()["brokerRole"] == "SLAVE" for b in left)

        # one returns: three again, a leader, writes
        returned_at = time.monotonic()
        third.start()
        routed.wait_acked(20, since=returned_at)
        routed.stop()
        # the two still down return too, and all five end alike
        first.start()
        followers[0].start()
        senders = [routed, *straight]
        check_history(g, [b for s in senders for b in s.acked_bodies], [b for s in senders for b in s.tried],
                      members=list(g.brokers.values()))
