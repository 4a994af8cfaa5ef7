"""Stopping a broker the way service managers and shells do: a SIGTERM to its whole process group
(systemd's default KillMode=control-group, `kill -TERM -- -PGID`, a shell stopping a job), and
systemd's whole stop (that SIGTERM, then SIGKILL to whatever is left after TimeoutStopSec).

The broker's service processes and its local-mode gRPC front get the group's signal too. They must
leave the stop to the broker, which stops them in its own order after its last writes: no service
is restarted while the broker stops, every process of the group is gone before the timeout (so the
SIGKILL finds nothing), the store is marked cleanly stopped, and every acknowledged message is
there after the restart."""
from __future__ import annotations

import os
import signal

import pytest

from broker.remoting import codes
from broker.services.process import Shutdown
from tests.conftest import free_port
from tests.helpers.ha_cluster import Broker, NameServer, call, send_all
from tests.helpers.procs import group_members, wait_until

TOPIC = "GroupStop"
QUEUES = 4
TIMEOUT_STOP_SEC = 20  # what the systemd-style stop waits before its SIGKILL


def _stored(port: int) -> int:
    return sum(int(call(port, codes.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q}).ext["offset"])
               for q in range(QUEUES))


@pytest.mark.parametrize("manager", ["shell", "systemd"])
def test_a_sigterm_to_the_whole_group_stops_the_broker_cleanly(tmp_path, manager):
    ns = NameServer(tmp_path)
    b = Broker(tmp_path, "b", ns.addr, "ASYNC_MASTER", 0,
               extra=f"flushDiskType=SYNC_FLUSH\ngrpcServerPort={free_port()}\n")
    try:
        b.start()
        bodies = [b"m%04d" % i for i in range(200)]
        replies = send_all(b.port, TOPIC, bodies, QUEUES)
        assert [r.code for r in replies] == [codes.SUCCESS] * len(bodies)
        members = group_members(b.child.pgid)
        assert len(members) >= 5, f"broker, flush, reput, ha, clean (and the front): {members}"

        os.killpg(b.child.pgid, signal.SIGTERM)
        try:  # what a service manager does: it waits for the group to empty
            wait_until(lambda: not group_members(b.child.pgid), TIMEOUT_STOP_SEC, "the group to empty")
        except AssertionError:
            left = group_members(b.child.pgid)
            if manager == "systemd":
                os.killpg(b.child.pgid, signal.SIGKILL)
            raise AssertionError(f"still running {TIMEOUT_STOP_SEC}s after the group's SIGTERM: {left}") from None
        assert b.child.proc.wait(5) == 0
        log = b.stderr()
        assert "restarting" not in log, log[-4000:]
        b.child.wait_lines(lambda ls: any("stopped cleanly" in line for line in ls), 5, "the clean stop's line")
        assert not (b.store / "abort").exists(), "the store was not marked cleanly stopped"
        b.child.kill_group()

        b.start()
        assert _stored(b.port) == len(bodies)
    finally:
        b.stop()
        ns.stop()


def test_the_stop_exception_is_not_an_exception():
    """Raised from a signal handler, it can land inside any call; one that catches Exception (as
    logging's error handler does) must not swallow it, so it derives from BaseException only."""
    assert issubclass(Shutdown, BaseException) and not issubclass(Shutdown, Exception)
