"""The broker supervises its flush and reput processes: kill -9 one mid-stream and it is restarted,
puts keep working, and nothing is lost or duplicated; a stopped flush service makes SYNC_FLUSH puts
time out instead of acknowledging data that is not durable. And the other side of supervision:
stopping. close() must not take a service that finishes on request for a crashed one, a stop that
lands while a (re)started service syncs its backlog must still end in its final flush, and a SIGTERM
must work whichever thread of the service the kernel delivers it to."""
from __future__ import annotations

import asyncio
import collections
import ctypes
import os
import signal
import time

from broker.services.message_store import GetStatus, MessageStore, PutStatus
from broker.store.checkpoint import StoreCheckpoint
from broker.store.config import MessageStoreConfig
from broker.store.message import decode_message
from broker.store.offset_table import Slot
from tests.helpers.procs import async_wait_until, pid_alive, proc_stat

TOPICS = ("SupA", "SupB")
QUEUES = 3


def _config(tmp_path, **kw) -> MessageStoreConfig:
    base = dict(storePathRootDir=str(tmp_path / "store"), mappedFileSizeCommitLog=1 << 20,
                mappedFileSizeConsumeQueue=20 * 2000, flushDiskType="SYNC_FLUSH",
                # these tests read back every put; on a host disk above 85 % the cleaner would
                # (rightly) delete segments forcibly, as it did once on CI
                cleanFileForciblyEnable=False)
    base.update(kw)
    return MessageStoreConfig(**base)


class Producers:
    """Concurrent producers putting unique bodies until stopped; records every outcome."""

    def __init__(self, store: MessageStore, n: int = 8):
        self.store = store
        self.results: list[tuple[str, int, bytes, object]] = []  # (topic, qid, body, PutResult)
        self.errors: list[BaseException] = []
        self._stop = False
        self.tasks = [asyncio.ensure_future(self._run(w)) for w in range(n)]

    async def _run(self, w: int) -> None:
        seq = 0
        while not self._stop:
            topic, qid = TOPICS[seq % 2], (w + seq) % QUEUES
            body = b"w%d-s%d-" % (w, seq) + b"x" * ((w * 131 + seq * 17) % 1500)
            try:
                r = await self.store.put(topic, qid, body, {"TAGS": "t%d" % w})
            except BaseException as e:  # noqa: BLE001 - recorded, asserted on below
                self.errors.append(e)
                return
            self.results.append((topic, qid, body, r))
            seq += 1
            if not self.store.sync_flush:
                await asyncio.sleep(0)

    async def stop(self, timeout: float = 30) -> None:
        self._stop = True
        await asyncio.wait_for(asyncio.gather(*self.tasks), timeout)


def _queue_bodies(store: MessageStore, topic: str, qid: int) -> list[bytes]:
    """Read a queue fully with store.get; asserts its queue offsets are dense from 0."""
    mx = store.max_offset(topic, qid)
    bodies, offs = [], []
    off = 0
    while off < mx:
        g = store.get(topic, qid, off, max_msgs=512, max_bytes=8 << 20)
        assert g.status is GetStatus.FOUND, (topic, qid, off, g.status)
        for view, qo in zip(g.messages, g.queue_offsets):
            m = decode_message(view)
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, qo)
            bodies.append(m.body)
            offs.append(qo)
        g.release()
        off = g.next_offset
    assert offs == list(range(mx))
    return bodies


def _assert_exactly_once(store: MessageStore, results) -> None:
    for topic in TOPICS:
        for qid in range(QUEUES):
            want = collections.Counter(b for t, q, b, _ in results if (t, q) == (topic, qid))
            got = collections.Counter(_queue_bodies(store, topic, qid))
            assert got == want, (topic, qid, len(got), len(want), set(got) ^ set(want))
            assert max(got.values(), default=1) == 1  # bodies are unique: no duplicates


async def _kill_and_wait_restart(store: MessageStore, name: str, slot: Slot) -> tuple[int, int]:
    old = store.service_pids()[name]
    assert old is not None and store.table.load(slot) == old
    os.kill(old, signal.SIGKILL)
    svc = store.services[name]
    # restarted: a new process that got ready (published its pid in the offset table)
    new = await async_wait_until(
        lambda: (svc.pid not in (None, old) and store.table.load(slot) == svc.pid and pid_alive(svc.pid)
                 and svc.pid), 20, f"the {name} service to be restarted")
    assert not pid_alive(old)
    assert svc.restarts == 1
    return old, new


def test_flush_service_killed_is_restarted_and_nothing_is_lost(tmp_path):
    cfg = _config(tmp_path)

    async def go():
        s = MessageStore(cfg)
        await s.start()
        try:
            p = Producers(s)
            await async_wait_until(lambda: len(p.results) >= 300, 20, "300 puts before the kill")
            killed_at = len(p.results)
            old, new = await _kill_and_wait_restart(s, "flush", Slot.FLUSH_PID)
            restarted_at = len(p.results)
            await async_wait_until(lambda: len(p.results) >= restarted_at + 300, 20, "300 puts after the restart")
            await p.stop()
            assert not p.errors, p.errors
            statuses = collections.Counter(r.status for *_, r in p.results)
            assert set(statuses) <= {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT}, statuses
            # the new flush service acknowledges again
            assert all(r.status is PutStatus.PUT_OK for *_, r in p.results[restarted_at + 100:])
            last = max(r.end_offset for *_, r in p.results)
            assert s.offsets()["flushed"] >= last
            assert s.service_pids()["flush"] == new
            print(f"flush {old} killed after {killed_at} puts, {new} ready after {restarted_at}; {statuses}")
        finally:
            await s.close()
        assert not os.path.exists(os.path.join(cfg.storePathRootDir, "abort"))  # stopped cleanly
        async with MessageStore(cfg) as s2:
            assert s2.recovery.clean
            # every put is there once: PUT_OK ones, and any FLUSH_DISK_TIMEOUT (stored, not yet durable)
            _assert_exactly_once(s2, p.results)

    asyncio.run(go())


def test_reput_service_killed_is_restarted_and_every_put_is_consumable_once(tmp_path):
    cfg = _config(tmp_path)

    async def go():
        s = MessageStore(cfg)
        await s.start()
        try:
            p = Producers(s)
            await async_wait_until(lambda: len(p.results) >= 300, 20, "300 puts before the kill")
            _, new = await _kill_and_wait_restart(s, "reput", Slot.REPUT_PID)
            restarted_at = len(p.results)
            await async_wait_until(lambda: len(p.results) >= restarted_at + 300, 20, "300 puts after the restart")
            await p.stop()
            assert not p.errors, p.errors
            assert all(r.status is PutStatus.PUT_OK for *_, r in p.results)
            wrote = s.offsets()["wrote"]
            assert await s.wait_dispatched(wrote, 20) >= wrote  # the new reput caught up
            assert s.service_pids()["reput"] == new
            total = sum(s.max_offset(t, q) for t in TOPICS for q in range(QUEUES))
            assert total == len(p.results)
            _assert_exactly_once(s, p.results)  # served by the live store, indexed by the new reput
        finally:
            await s.close()
        async with MessageStore(cfg) as s2:
            assert s2.recovery.clean
            _assert_exactly_once(s2, p.results)

    asyncio.run(go())


def test_stopped_flush_service_turns_sync_puts_into_flush_disk_timeout(tmp_path):
    cfg = _config(tmp_path, syncFlushTimeout=500)

    async def go():
        s = MessageStore(cfg)
        await s.start()
        pid = s.service_pids()["flush"]
        results = []
        try:
            r0 = await s.put("Stop", 0, b"before")
            assert r0.status is PutStatus.PUT_OK
            results.append((r0, b"before"))
            os.kill(pid, signal.SIGSTOP)
            await async_wait_until(lambda: (proc_stat(pid) or ("?",))[0] == "T", 10, "the flush service to stop")
            t0 = time.monotonic()
            stopped = await asyncio.gather(*(s.put("Stop", i % 2, b"during-%d" % i) for i in range(20)))
            elapsed = time.monotonic() - t0
            assert [r.status for r in stopped] == [PutStatus.FLUSH_DISK_TIMEOUT] * 20
            assert elapsed >= 0.45, elapsed  # they waited for syncFlushTimeout, not less
            one = await s.put("Stop", 1, b"during-single")
            assert one.status is PutStatus.FLUSH_DISK_TIMEOUT
            assert s.offsets()["flushed"] <= r0.end_offset  # nothing after the stop was made durable
            results += [(r, b"during-%d" % i) for i, r in enumerate(stopped)] + [(one, b"during-single")]
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        try:
            after = await asyncio.gather(*(s.put("Stop", i % 2, b"after-%d" % i) for i in range(20)))
            assert [r.status for r in after] == [PutStatus.PUT_OK] * 20
            assert s.offsets()["flushed"] >= max(r.end_offset for r, _ in results)
            assert s.service_pids()["flush"] == pid and s.services["flush"].restarts == 0  # stopped, not dead
            results += [(r, b"after-%d" % i) for i, r in enumerate(after)]
        finally:
            await s.close()
        async with MessageStore(cfg) as s2:  # timed-out messages were stored, just not acknowledged
            for r, body in results:
                m = s2.lookup(r.physical_offset)
                assert (m.body, m.queue_offset) == (body, r.queue_offset)
            assert s2.max_offset("Stop", 0) + s2.max_offset("Stop", 1) == len(results)

    asyncio.run(go())


def test_close_does_not_mistake_a_service_finishing_on_its_own_for_a_crash(tmp_path):
    """close() publishes SHUTDOWN, then stops the services one by one. A service that sees SHUTDOWN
    and finishes by itself while close() is still busy with another one was asked to stop: it must
    not be restarted, and the store must still end up cleanly stopped."""
    cfg = _config(tmp_path, flushIntervalConsumeQueue=300)

    async def go():
        s = MessageStore(cfg)
        await s.start()
        flush, reput = s.services["flush"], s.services["reput"]
        reput_pid = reput.pid
        stopped = None
        close = None
        try:
            assert (await s.put("Close", 0, b"one")).status is PutStatus.PUT_OK
            # the reput made its consume queues durable for "one" just now ...
            await async_wait_until(lambda: s.ckpt.get("cqFlushedOffset") >= s.offsets()["wrote"], 10,
                                   "the reput service to flush its consume queues")
            # ... and hold close() in waiting for a flush service that is not ready yet: kill it and
            # freeze its replacement while it is still starting (before it installs any handler)
            old = flush.pid
            os.kill(old, signal.SIGKILL)
            stopped = await async_wait_until(lambda: flush.pid != old and flush.pid, 10, "the flush restart")
            os.kill(stopped, signal.SIGSTOP)
            assert s.table.load(Slot.FLUSH_PID) != stopped  # not ready
            # "two" is dispatched within flushIntervalConsumeQueue of that flush, so the reput sleeps
            # with a timeout and, SHUTDOWN being set by then, returns by itself when it fires
            r = await s.put("Close", 0, b"two", wait=False)
            await s.wait_dispatched(r.end_offset, 10)
            close = asyncio.ensure_future(s.close())
            await async_wait_until(lambda: reput.exited.is_set() or reput.pid != reput_pid, 10,
                                   "the reput service to finish by itself")
            assert reput.restarts == 0 and reput.pid == reput_pid, "a stopping reput service was restarted"
        finally:
            if stopped is not None:
                try:
                    os.kill(stopped, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            if close is None:
                await s.close()
            else:
                await asyncio.wait_for(close, 30)
        assert not os.path.exists(os.path.join(cfg.storePathRootDir, "abort")), "close() did not stop cleanly"
        async with MessageStore(cfg) as s2:
            assert s2.recovery.clean
            assert _queue_bodies(s2, "Close", 0) == [b"one", b"two"]

    asyncio.run(go())


def test_stop_right_after_a_restart_still_makes_everything_durable(tmp_path):
    """A restarted flush service reports ready, then syncs what its predecessor left unflushed. A
    stop (SIGTERM) arriving during that first sync must still end in the final flush (a clean stop
    with every byte durable), not kill the service half-way."""
    cfg = _config(tmp_path, flushDiskType="ASYNC_FLUSH", mappedFileSizeCommitLog=4 << 20,
                  flushIntervalCommitLog=600_000, flushCommitLogThoroughInterval=600_000,
                  flushCommitLogLeastPages=1 << 30)

    async def go():
        s = MessageStore(cfg)
        await s.start()
        try:
            bodies = [b"%06d" % i + b"d" * 4000 for i in range(1000)]
            while s.offsets()["wrote"] < 48 << 20:  # ~48 MiB left dirty for the flush service
                await s.put_batch("Dirty", 0, bodies)
            wrote = s.offsets()["wrote"]
            assert s.offsets()["flushed"] < wrote
            await _kill_and_wait_restart(s, "flush", Slot.FLUSH_PID)
        finally:
            await s.close()  # at once: the new flush service is busy with its first sync
        ckpt = StoreCheckpoint(os.path.join(cfg.storePathRootDir, "checkpoint"))
        try:
            assert ckpt.get("flushedOffset") == wrote
            assert ckpt.get("cleanOffset") == wrote, "close() did not stop cleanly"
        finally:
            ckpt.close()
        assert not os.path.exists(os.path.join(cfg.storePathRootDir, "abort"))

    asyncio.run(go())


def _tgkill(pid: int, tid: int, sig: int) -> None:
    """Send `sig` to one thread of another process (glibc >= 2.30 wraps the syscall)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, sig) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _thread_sleeps_in_futex(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/task/{pid}/wchan") as f:
            return f.read().startswith("futex") and (proc_stat(pid) or ("?",))[0] == "S"
    except FileNotFoundError:
        return False


def _threads_taking(pid: int, sig: int) -> list[int]:
    """Threads of a process the kernel may hand a process-directed `sig` to (those not blocking it)."""
    out = []
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            blocked = int(next(ln for ln in f if ln.startswith("SigBlk:")).split()[1], 16)
        if not blocked & (1 << (sig - 1)):
            out.append(tid)
    return out


def test_sigterm_stops_a_service_whichever_of_its_threads_receives_it(tmp_path):
    """kill(2) hands a process-directed signal to any thread that does not block it: to the main
    thread in the common case, to another one when the main thread is frozen or already has a
    signal pending (a SIGSTOP/SIGCONT, Ctrl-Z of the process group). A service idle in its futex
    wait must act on the broker's SIGTERM whichever of its eligible threads gets it; otherwise
    close() waits 30 s and SIGKILLs it, losing its final flush. Here the signal goes to the thread
    the kernel would least prefer: an eligible thread other than the sleeping main thread, if there
    is one. A SIGTERM the broker did not ask for (SHUTDOWN not set: the whole process group got it,
    and the broker stops its services itself) is ignored, wherever it lands."""
    cfg = _config(tmp_path)

    async def go():
        s = MessageStore(cfg)
        await s.start()
        try:
            assert (await s.put("Sig", 0, b"x")).status is PutStatus.PUT_OK
            await s.wait_dispatched(s.offsets()["wrote"], 10)
            targets = {name: await _another_thread(s, name) for name in ("flush", "reput")}
            for name, (pid, tid) in targets.items():
                _tgkill(pid, tid, signal.SIGTERM)  # the group's: the service goes on
            # SYNC_FLUSH: answered only once the flush service synced it; then the reput dispatches it
            assert (await s.put("Sig", 0, b"y")).status is PutStatus.PUT_OK
            await s.wait_dispatched(s.offsets()["wrote"], 10)
            assert {name: s.services[name].pid for name in targets} == {n: p for n, (p, _) in targets.items()}
            targets = {name: await _another_thread(s, name) for name in ("flush", "reput")}
            for name in targets:
                s.services[name].stopping = True  # as close() marks them before it asks
            s.table.store(Slot.SHUTDOWN, 1)  # the broker's request, without the wake-up it comes with
            for name, (pid, tid) in targets.items():
                _tgkill(pid, tid, signal.SIGTERM)
                await async_wait_until(lambda: not pid_alive(pid), 5,
                                       f"the {name} service to act on a SIGTERM received by thread {tid}")
                assert s.services[name].restarts == 0
        finally:
            for name in ("flush", "reput"):
                pid = s.services[name].pid
                if pid is not None and pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)  # let the store close after a failure
            await s.close()

    asyncio.run(go())


async def _another_thread(s: MessageStore, name: str) -> tuple[int, int]:
    """(pid, tid) of the service idle in its futex wait, and the thread to signal: an eligible one
    other than its main thread if it has one."""
    pid = s.services[name].pid
    # the reput sleeps without a timeout only once its consume queues are flushed
    await async_wait_until(lambda: s.ckpt.get("cqFlushedOffset") >= s.offsets()["wrote"], 10,
                           "consume queues flushed")
    await async_wait_until(lambda: _thread_sleeps_in_futex(pid), 10, f"the {name} service idle")
    threads = _threads_taking(pid, signal.SIGTERM)
    return pid, next((t for t in threads if t != pid), pid)
