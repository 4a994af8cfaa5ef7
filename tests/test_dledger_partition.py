"""No split brain (issue 17): the DLedger leader is partitioned from the other two members (its
Raft links cut or stalled through loopback proxies) while its client port stays reachable, and
clients keep writing to both sides: straight to the old leader, and to the majority's new master
through the name server's route.

The old leader must never answer SEND_OK for a write it cannot commit: its sends fail or time
out, and it steps down after maxHeartBeatLeak heartbeats without a quorum, refusing sends from
then on with a remark saying why. The majority elects a leader and takes writes. After the heal,
the old leader truncates its uncommitted entries (its log says how many), follows the new leader,
and every member ends with the same consume queues, holding each acknowledged message once
(RocketMQ #7017 lost such writes in controller mode)."""
from __future__ import annotations

import asyncio
import re
import time

import pytest

from broker.client.errors import ClientError
from tests.conftest import wait_for
from tests.helpers.dledger_checks import check_history, send_direct
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.dledger_senders import sending

STEP_DOWN_S = 10  # 3 heartbeats of 200 ms, then a round: generous on a shared 2-core machine
AFTER_CUT = b"sent to the old leader after the cut"
TRUNCATED = re.compile(r"\[(n\d)\] truncated (\d+) uncommitted entries from index (\d+)")


@pytest.mark.parametrize("how", ["cut", "stall"])
def test_partitioned_leader_acknowledges_nothing_it_cannot_commit_and_loses_nothing_after_heal(tmp_path, how):
    with sending(DLedgerGroup(tmp_path, proxied=True)) as (g, sender):
        old = g.leader()
        others = [b for b in g.brokers.values() if b is not old]
        majority = sender("maj")
        majority.wait_acked(20)
        straight = sender("old", to=old)
        straight.wait_acked(5)
        old_term = old.info()["dLedgerTerm"]

        g.isolate(old, how)
        # from here on nothing the old leader appends can reach a peer (before isolate() returned,
        # a send could still be replicated through a link not yet cut, and rightly acknowledged)
        cut_at = time.monotonic()
        # a send the old leader takes after the cut: in its log only (the sends already waiting may
        # all have reached a follower before the cut, and then the new leader keeps them), so it
        # fails when the leader steps down, and the heal must truncate it
        with pytest.raises(ClientError, match="TERM_CHANGED"):
            asyncio.run(send_direct(f"127.0.0.1:{old.port}", body=AFTER_CUT))
        new = g.leader(among=others, timeout=30)
        assert new.info()["dLedgerTerm"] > old_term
        elected_at = time.monotonic()
        # the old leader steps down on its own (no quorum heartbeat), it is not told to
        wait_for(lambda: old.info()["dLedgerRole"] != "LEADER", STEP_DOWN_S, "the old leader to step down")
        assert old.info()["brokerRole"] == "SLAVE"
        assert "stepping down" in old.stderr()
        # the majority takes writes through the route; the old leader, written to straight, refuses
        majority.wait_acked(20, since=elected_at)
        failed = len(straight.remarks)
        straight.wait_failed(failed + 3)
        assert straight.acked_since(cut_at) == [], \
            f"the partitioned leader acknowledged writes it cannot commit: {straight.acked_since(cut_at)}"
        # the sends it held when it stepped down fail at that instant, saying so (not RocketMQ's bare
        # UNKNOWN_ERROR); the ones after are refused (SERVICE_NOT_AVAILABLE) naming its role
        assert any("TERM_CHANGED" in r and f"{old.name} became CANDIDATE" in r for _, r in straight.remarks), \
            straight.remarks
        refusal = straight.remarks[-1][1]
        assert "code 14" in refusal and f"DLedger member {old.name}" in refusal and "not the leader" in refusal, \
            refusal
        straight.stop()

        g.heal()
        g.wait_follows(old, new)
        # a deposed leader's refusal names the leader it follows now
        with pytest.raises(ClientError, match=rf"code 14: .*the leader is {new.name}"):
            asyncio.run(send_direct(f"127.0.0.1:{old.port}"))
        majority.wait_acked(10, since=time.monotonic())
        majority.stop()

        seen = check_history(g, majority.acked_bodies + straight.acked_bodies,
                             majority.tried + straight.tried + [AFTER_CUT], members=list(g.brokers.values()))
        assert seen[AFTER_CUT] == 0, "an entry only the partitioned leader held survived the heal"
        assert all(seen[b] == 1 for b in majority.acked_bodies)
        # the old leader's sends that were in its log when it was cut: truncated, and its log says how many
        truncations = [m for m in TRUNCATED.finditer(old.stderr()) if m.group(1) == old.name]
        assert truncations, f"{old.name} logged no truncation of its uncommitted entries"
        assert all(int(m.group(2)) >= 1 for m in truncations)
