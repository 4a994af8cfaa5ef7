"""The fault tests' read-back (tests/helpers/history.drain, dledger_checks.pull_all) waits until the
broker dispatched what its commit log held: an acknowledged send is in the log before the reput
(its own process) puts it in a consume queue, as in RocketMQ, so a read of the queues right after
the last acknowledgement could miss a queue's tail. Two CI runs reported such tails as lost. Here
the reput is stopped (SIGSTOP) while sends are acknowledged, and resumed only once the drain has
found the broker behind: the drain still reads every message."""
from __future__ import annotations

import os
import signal

from broker.remoting import codes
from tests.helpers.ha_cluster import Broker, NameServer, send_all
from tests.helpers.history import History, drain
from tests.helpers.procs import service_pids

TOPIC = "DrainBehind"


def test_drain_reads_acknowledged_sends_the_reput_dispatched_late(tmp_path):
    ns = NameServer(tmp_path)
    b = Broker(tmp_path, "b", ns.addr, "ASYNC_MASTER", 0).start()
    try:
        reput = service_pids(b.child.proc.pid)["broker.services.reput_service"]
        os.kill(reput, signal.SIGSTOP)
        resumed = []

        def resume(behind: int) -> None:
            resumed.append(behind)
            os.kill(reput, signal.SIGCONT)
        try:
            rs = send_all(b.port, TOPIC, [b"m%d|behind" % i for i in range(40)])
            assert [r.code for r in rs] == [codes.SUCCESS] * 40
            assert b.info()["dispatchBehindBytes"] > 0  # acknowledged, in no queue yet
            h = History()
            n = drain(h, b.port, TOPIC, on_behind=resume)
        finally:
            os.kill(reput, signal.SIGCONT)
        assert resumed and resumed[0] > 0, "the drain did not wait for the reput"
        assert n == 40 and sorted(i for i, _, _ in h.consumed) == list(range(40))
    finally:
        b.stop()
        ns.stop()
