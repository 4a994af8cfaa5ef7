"""Controller mode end to end (issue 18): brokers of one group with enableControllerMode=true, three
controllers, a name server, all real processes on loopback; kill -9 for real, every acknowledged
send checked afterwards with the history checker (tests/helpers/history.py)."""
from __future__ import annotations

import time

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.history import History, Workload, drain

TOPIC = "CmTopic"
ALL_ACK = "allAckInSyncStateSet=true\n"


class _Target:
    """The port the workload sends to: the master the test found last (the workload's own loop
    cannot ask the brokers synchronously)."""

    def __init__(self):
        self.port = 1

    def __call__(self) -> int:
        return self.port


def _check(g: ControllerModeGroup, history: History) -> None:
    m = g.master()
    drain(history, m.port, TOPIC)
    v = history.check()
    print("history:", v.row())
    assert v.sends.get("ok", 0) > 0, v.row()
    assert not v.lost, f"acknowledged sends lost: {v.lost[:20]} ({len(v.lost)}); {v}"
    assert not v.duplicates and not v.failed_seen and not v.misplaced and not v.holes, v.row()


def test_two_brokers_ten_master_kills_lose_nothing_acknowledged(tmp_path):
    g = ControllerModeGroup(tmp_path, extra=ALL_ACK).start()
    history = History()
    target = _Target()
    work = Workload(history, target, TOPIC, reconnect_on=frozenset({codes.SYSTEM_BUSY,
                                                                           codes.SERVICE_NOT_AVAILABLE}))
    outages = []
    try:
        m = g.master()
        target.port = m.port
        work.start()
        for _ in range(10):
            g.wait_in_sync(m, 2)
            before = work.acked()
            wait_for(lambda: work.acked() >= before + 50, 30, "50 more sends acknowledged")
            t0 = time.monotonic()
            m.kill9()
            new = g.master(exclude=m)
            target.port = new.port
            acked = work.acked()
            wait_for(lambda: work.acked() > acked, 30, "a send acknowledged by the new master")
            outages.append(time.monotonic() - t0)
            m.start()
            m = new
        g.wait_in_sync(m, 2)
        work.stop()
        print("outages (kill -9 to the next acknowledged send):", [f"{o:.2f}" for o in outages])
        _check(g, history)
        for b in g.brokers.values():
            assert "Traceback" not in b.stderr(), b.stderr()[-3000:]
    finally:
        if work.thread.is_alive():
            work.stop_event.set()
        g.stop()
