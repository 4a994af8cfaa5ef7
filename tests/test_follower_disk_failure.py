"""A failing disk on the followers' side (tests/test_fsync_failure.py has the master's): the HA
slave's and the DLedger follower's writers, under the LD_PRELOAD fault shim
(tests/faults/fsync_fault.c) in the follower's processes only.

After a failed fdatasync/msync the kernel may have dropped the dirty pages it covered
("fsyncgate"), so a later sync that succeeds proves nothing. A follower then acknowledges nothing
more to its master or leader, stops taking replicated writes (a log line, a metric), and comes
back after a restart by recovering its log by CRC and fetching the rest. Every SEND_OK the
producer got is on the master/leader, and after the restart on the follower too. A pwrite that
writes short (half of each call) loses and corrupts nothing."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from broker.remoting import codes
from broker.store.message import decode_message
from tests.conftest import wait_for
from tests.helpers.fault_shim import build_shim, faults_logged, shim_env
from tests.helpers.ha_cluster import Broker, NameServer, call, send_all, wait_replicated

TOPIC = "FollowerDisk"


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def _bodies(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [b"%d-%d:" % (seed, i) + rnd.randbytes(rnd.randint(10, 3000)) for i in range(n)]


def _acked(replies, bodies) -> list[tuple[int, bytes]]:
    """(physical offset, body) of every send answered SEND_OK (the offset is in its msgId)."""
    return [(int(r.ext["msgId"][16:], 16), b) for r, b in zip(replies, bodies) if r.code == codes.SUCCESS]


def _holds(b: Broker, acked: list[tuple[int, bytes]]) -> None:
    """Every acknowledged message is stored on `b` at its offset, byte for byte."""
    for phys, body in acked:
        r = call(b.port, codes.VIEW_MESSAGE_BY_ID, {"offset": phys})
        assert r.code == codes.SUCCESS, f"{b.name} lost the SEND_OK at {phys}: {r.remark}"
        assert bytes(decode_message(bytes(r.body), 0).body) == body, f"{b.name} holds another body at {phys}"


def _last_run(b: Broker) -> str:
    return (b.logs / f"stderr.{b.runs}").read_text(errors="replace")


def test_a_slave_whose_fdatasync_fails_once_acknowledges_nothing_more_and_recovers_after_a_restart(tmp_path, shim):
    ns = NameServer(tmp_path)
    master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0, "syncFlushTimeout=3000\n")
    ctl = tmp_path / "slave.ctl"
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1, f"haMasterAddress=127.0.0.1:{master.ha_port}\n",
                   env=shim_env(shim, ctl))
    try:
        master.start()
        # every pwrite of a replicated frame into the slave's commit log writes half: it goes on
        # where it stopped, so the slave's log is still the master's, byte for byte
        ctl.write_text("short-pwrite")
        slave.start()
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the slave to link")
        bodies = _bodies(300, 1)
        acked = _acked(send_all(master.port, TOPIC, bodies), bodies)
        assert len(acked) == len(bodies)
        wait_replicated(master, slave)
        assert any(f.startswith("short-pwrite") for f in faults_logged(ctl))
        _holds(slave, acked)

        # the slave's next fdatasync fails, once: the fault a retry would hide
        ctl.write_text("eio-once fdatasync")
        seed, answered = 2, []
        while not any(r.code != codes.SUCCESS for r in answered):
            assert seed < 200, "the slave's flush never failed"
            bodies = _bodies(20, seed)
            answered = send_all(master.port, TOPIC, bodies)
            acked += _acked(answered, bodies)
            seed += 1
        assert {r.code for r in answered} <= {codes.SUCCESS, codes.SLAVE_NOT_AVAILABLE, codes.FLUSH_SLAVE_TIMEOUT}
        assert [f.split()[0] for f in faults_logged(ctl) if not f.startswith("short")] == ["fdatasync"]
        assert ctl.read_text() == ""  # fdatasync works again from here on: the slave stays stopped anyway
        wait_for(lambda: "stops replicating and acknowledges nothing more" in slave.stderr(), 30, "the slave's log line")
        wait_for(lambda: master.info()["slaves"] == 0, 30, "the master to lose its slave")
        info = slave.info()
        assert info["slave_replication_stopped"] == 1 and info["linked"] == 0 and info["flush_errors"] >= 1, info
        # nothing the slave received after the failure was acknowledged, and nothing more is
        held, counted = info["received"], master.info()["acked"]
        assert counted <= held
        bodies = _bodies(20, 999)
        assert {r.code for r in send_all(master.port, TOPIC, bodies)} == {codes.SLAVE_NOT_AVAILABLE}
        assert slave.info()["received"] == held and master.info()["acked"] == counted
        _holds(master, acked)

        slave.stop()
        assert "next start recovers" in slave.stderr()  # not marked clean: the restart checks CRCs
        slave.start()
        assert re.search(r"recovered commit log after a crash: scanned [1-9]", _last_run(slave))
        wait_for(lambda: master.info()["slaves"] == 1, 30, "the restarted slave to link")
        bodies = _bodies(20, 1000)
        replies = send_all(master.port, TOPIC, bodies)
        assert all(r.code == codes.SUCCESS for r in replies)  # SYNC_MASTER counts on the slave again
        acked += _acked(replies, bodies)
        wait_replicated(master, slave)
        _holds(slave, acked)
        _holds(master, acked)
    finally:
        slave.stop()
        master.stop()
        ns.stop()
