"""An append that stalls in a page fault (RocketMQ's osPageCacheBusyTimeOutMills, BrokerFastFailure):
the sends that pile up during the stall are answered SYSTEM_BUSY "[PCBUSY_CLEAN_QUEUE]broker busy,
..." and not stored, as a Java broker cleans its send queue while its put lock is held that long;
every SEND_OK is stored; then sends are taken again. brokerFastFailureEnable=false: they wait.

How the append stalls: the LD_PRELOAD shim (tests/faults/fsync_fault.c, "stall-write") makes the
broker's mapped commit log read-only, so that the next append's write into the map faults, and
holds that fault 1.5 s in its SIGSEGV handler before making the map writable again: the send
kernel's copy into the map stops at a page fault for 1.5 s, where a slow disk stops it. The broker
has no test hook: it measures its appends as it always does. Why not a disk that is slow for
real: the page an append writes is never read from the disk here (the segment's blocks are
fallocate'd, unwritten, and read as zeros; under SYNC_FLUSH they were written with zeros and are
cached), so slowing the device (dm-delay: no device mapper in this container) would not stall
it; a FUSE file system whose READ sleeps would, but this machine has neither a FUSE library nor
fusermount (/dev/fuse alone), and CI containers need not have /dev/fuse.
"""
from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

import pytest

from broker.remoting import codes
from tests.helpers.fault_shim import build_shim, faults_logged
from tests.helpers.ha_cluster import Broker
from tests.helpers.raw_wire import RawConn, bodies, pull

TOPIC = "PageCacheBusy"
STALL_MS = 1500
PCBUSY = re.compile(r"^\[PCBUSY_CLEAN_QUEUE\]broker busy, start flow control for a while, "
                    r"period in queue: (\d+)ms, size of queue: (\d+)$")


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def _broker(tmp_path: Path, shim: Path, extra: str = "") -> tuple[Broker, Path]:
    ctl = tmp_path / "stall.ctl"
    ctl.write_text("")
    env = {**os.environ, "LD_PRELOAD": str(shim), "FSYNC_FAULT_CTL": str(ctl), "FSYNC_FAULT_WATCH": "1"}
    return Broker(tmp_path, "b", "", "ASYNC_MASTER", 0, env=env, extra=extra).start(), ctl


async def _produce(port: int, ctl: Path, pid: int, stall_after: float, run_for: float, every: float = 0.004):
    """A producer sending one message every `every` s without waiting for the answers (an open
    loop: sends keep arriving while the broker stalls); `stall_after` s in, the broker's next
    append stalls STALL_MS. (body, sent at, answer) of each send."""
    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect
    conn = await connect("127.0.0.1", port)

    async def one(body: bytes):
        ext = {"a": "pg", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false"}
        t0 = time.monotonic()
        return body, t0, await conn.request(RemotingCommand.request(codes.SEND_MESSAGE_V2, ext, body), 30)
    try:
        assert (await one(b"first"))[2].code == codes.SUCCESS  # the topic made, by the processors
        tasks, i, t_start, armed = [], 0, time.monotonic(), False
        while (now := time.monotonic()) - t_start < run_for:
            if not armed and now - t_start >= stall_after:
                ctl.write_text(f"stall-write {STALL_MS} {pid}")
                armed = True
            tasks.append(asyncio.ensure_future(one(b"p%06d" % i)))
            i += 1
            await asyncio.sleep(every)
        return [await t for t in tasks]
    finally:
        conn.close()


def _stall_window(ctl: Path) -> tuple[float, float]:
    """When the stalled fault began and ended (the shim's CLOCK_MONOTONIC ms, as time.monotonic)."""
    lines = faults_logged(ctl)
    begin = [int(x.split()[2]) for x in lines if x.startswith("stall-write begin")]
    end = [int(x.split()[2]) for x in lines if x.startswith("stall-write end")]
    assert len(begin) == len(end) == 1, lines
    return begin[0] / 1000, end[0] / 1000


def _stored(port: int) -> list[bytes]:
    conn = RawConn(port)
    try:
        out: list[bytes] = []
        while got := bodies(pull(conn, TOPIC, 0, len(out))):
            out += got
        return out
    finally:
        conn.close()


def test_sends_that_piled_up_during_a_stalled_append_are_answered_system_busy_and_not_stored(tmp_path, shim):
    b, ctl = _broker(tmp_path, shim)
    try:
        answers = asyncio.run(_produce(b.port, ctl, b.child.proc.pid, 0.5, 3.5))
        begin, end = _stall_window(ctl)
        assert end - begin >= STALL_MS / 1000
        assert {r.code for _, _, r in answers} == {codes.SUCCESS, codes.SYSTEM_BUSY}
        busy = [(body, t, r) for body, t, r in answers if r.code == codes.SYSTEM_BUSY]
        for _, _, r in busy:
            m = PCBUSY.match(r.remark or "")
            assert m, r.remark
            assert int(m.group(1)) >= 1000  # waited at least osPageCacheBusyTimeOutMills
        # every send that arrived during the stall was refused, those TCP's window held back in the
        # producer's send buffer too (they reach the broker turns later); those well after it were taken
        during = [r.code for _, t, r in answers if begin + 0.05 <= t <= end - 0.05]
        assert len(during) > 100 and set(during) == {codes.SYSTEM_BUSY}, len(during)
        after = [r.code for _, t, r in answers if t >= end + 0.5]
        assert len(after) > 50 and set(after) == {codes.SUCCESS}
        # the store holds every SEND_OK, in the order answered per queue, and nothing refused
        ok = [body for body, _, r in answers if r.code == codes.SUCCESS]
        stored = _stored(b.port)
        assert stored[0] == b"first" and set(stored[1:]) == set(ok) and len(stored) == len(ok) + 1
        assert not {body for body, _, _ in busy} & set(stored)
        log = b.stderr()
        assert "an append held the send path" in log and "osPageCacheBusyTimeOutMills=1000" in log
        assert f"sends taken again after the stall: {len(busy)} refused SYSTEM_BUSY" in log
    finally:
        b.stop()


def test_brokerFastFailureEnable_false_keeps_the_sends_that_piled_up_waiting(tmp_path, shim):
    b, ctl = _broker(tmp_path, shim, "brokerFastFailureEnable=false\n")
    try:
        answers = asyncio.run(_produce(b.port, ctl, b.child.proc.pid, 0.3, 2.5))
        begin, end = _stall_window(ctl)
        assert {r.code for _, _, r in answers} == {codes.SUCCESS}
        assert len([t for _, t, _ in answers if begin + 0.05 <= t <= end - 0.05]) > 100
        stored = _stored(b.port)
        assert stored == [b"first"] + [body for body, _, _ in answers]  # one connection, one queue: in order
        assert "an append held the send path" not in b.stderr()
    finally:
        b.stop()


def test_the_keys_have_rocketmqs_defaults_and_a_bad_timeout_is_refused_naming_it():
    from broker.server.broker_config import load_broker_config
    from broker.store.errors import StoreConfigError
    broker, store, unknown = load_broker_config({})
    assert broker.brokerFastFailureEnable is True and store.osPageCacheBusyTimeOutMills == 1000
    broker, store, unknown = load_broker_config({"brokerFastFailureEnable": "false",
                                                 "osPageCacheBusyTimeOutMills": "300"})
    assert broker.brokerFastFailureEnable is False and store.osPageCacheBusyTimeOutMills == 300 and not unknown
    with pytest.raises(StoreConfigError, match="osPageCacheBusyTimeOutMills"):
        load_broker_config({"osPageCacheBusyTimeOutMills": "0"})


def test_a_stall_refuses_sends_for_the_next_turns_until_after_stall_has_passed_then_takes_them():
    """The busy window, turn by turn, on asyncio's loop (uvloop runs call_soon and timers between
    turns too): the stalled turn, the next, and every turn within after_stall of the stall's end
    (the backlog TCP's window held in the producers' send buffers arrives then); then taken."""
    from broker.remoting.command import RemotingCommand
    from broker.server.fast_failure import AFTER_STALL, FastFailure
    assert AFTER_STALL == 0.2  # waitTimeMillsInSendQueue's default in RocketMQ
    ff = FastFailure(True, 1000, after_stall=0.1)
    handlers = {codes.SEND_MESSAGE_V2: lambda cmd, conn: cmd.response(codes.SUCCESS), codes.PULL_MESSAGE: "pull"}
    ff.guard(handlers)
    assert handlers[codes.PULL_MESSAGE] == "pull"  # only the send thread pool's requests
    send = handlers[codes.SEND_MESSAGE_V2]
    req = RemotingCommand.request(codes.SEND_MESSAGE_V2, {}, b"x")

    async def turns() -> tuple[list[int], float, int]:
        codes_seen = []
        ff.stalled(time.perf_counter() - 1.2, time.perf_counter())
        t0 = time.perf_counter()
        for _ in range(5):
            codes_seen.append(send(req, None).code)
            await asyncio.sleep(0)  # one loop turn
        while ff.busy:  # taken again after_stall later, without a turn spun meanwhile
            await asyncio.sleep(0.01)
        waited = time.perf_counter() - t0
        return codes_seen, waited, send(req, None).code
    seen, waited, last = asyncio.run(turns())
    assert seen == [codes.SYSTEM_BUSY] * 5 and 0.09 <= waited < 1 and last == codes.SUCCESS
    assert ff.refused == 5 and ff.stalls == 1
    off = FastFailure(False, 1000)
    plain = {codes.SEND_MESSAGE_V2: send}
    off.guard(plain)
    assert plain[codes.SEND_MESSAGE_V2] is send  # brokerFastFailureEnable=false: nothing wrapped
