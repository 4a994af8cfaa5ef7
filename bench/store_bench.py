"""In-process store figures: put / put_batch throughput, SYNC_FLUSH latency, reput rate.

Every cell runs against a fresh store directory on the same filesystem as the limits'
work directory, with RocketMQ's default 1 GiB commit-log segments. The store pre-allocates
segments (ftruncate, a zero written through the map per page, fsync) in a background
thread: one at start, and the next one as soon as the first is attached. Each cell
therefore puts one warm-up message and waits for that next segment to be made before
its clock starts, and stops before it would fill the segment, so no cell times a
pre-allocation or a rollover.
"""
from __future__ import annotations

import asyncio
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from broker.kernels.codec import SCAN_BLANK, SCAN_END, MappedBuffer, Scanner
from broker.services.message_store import MessageStore, PutStatus
from broker.services.reput_service import BATCH as REPUT_BATCH
from broker.services.build_index import BuildIndex
from broker.services.reput_service import Dispatcher
from broker.store.config import ASYNC_FLUSH, SYNC_FLUSH, MessageStoreConfig
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.mapped_file import offset_to_name

TOPIC = "TopicTest"
PROPS = b"TAGS\x01TagA"          # a tag, so dispatch computes a tag hash as it would in use
SEGMENT = 1 << 30                 # mappedFileSizeCommitLog default
SEGMENT_BUDGET = 960 << 20        # bytes a cell may write into its one segment
MiB = 1 << 20


def record_size(body_len: int, topic: str = TOPIC, props: bytes = PROPS) -> int:
    return 91 + body_len + len(topic.encode()) + len(props)


def percentile_us(sorted_ns: list[int] | np.ndarray, q: float) -> float:
    """Nearest-rank percentile of sorted nanosecond samples, in microseconds (as bench.limits)."""
    n = len(sorted_ns)
    if n == 0:
        return math.nan
    rank = max(1, math.ceil(q * n))
    return float(sorted_ns[rank - 1]) / 1e3


@dataclass
class Settings:
    quick: bool = False
    cell_seconds: float = 2.5          # timed part of a throughput cell (or until the segment budget)
    latency_seconds: float = 3.0       # timed part of a latency cell
    sync_put_tasks: int = 256          # concurrent single-put tasks in the SYNC_FLUSH throughput cells
    sync_batch_tasks: int = 8          # concurrent put_batch tasks in the SYNC_FLUSH batch cells
    batch: int = 256
    latency_writers: tuple[int, ...] = (1, 16, 64)
    reput_records: int = 2_000_000
    reput_body: int = 128

    @classmethod
    def make(cls, quick: bool) -> "Settings":
        if quick:
            return cls(quick=True, cell_seconds=0.6, latency_seconds=1.0, reput_records=500_000)
        return cls()


# ----------------------------------------------------------------------------------- store set-up

class BenchStore:
    """A fresh MessageStore in its own directory under `workdir`; removed on exit."""

    def __init__(self, workdir: str, flush: str, **overrides):
        self.dir = tempfile.mkdtemp(prefix=f"store-{flush.split('_')[0].lower()}-", dir=workdir)
        self.config = MessageStoreConfig(storePathRootDir=self.dir, flushDiskType=flush,
                                         mappedFileSizeCommitLog=SEGMENT, **overrides)
        self.store = MessageStore(self.config)
        self.setup_s = 0.0
        self.keep = False  # leave the directory for the caller (the reput kernel cell reads its log)

    async def __aenter__(self) -> MessageStore:
        t0 = time.perf_counter()
        s = self.store
        await s.start()
        # The warm-up put attaches the first segment (pre-allocated at start) and starts the
        # pre-allocation of the second; wait for both, and for the services to see the put.
        r = await s.put(TOPIC, 0, b"warm-up", PROPS)
        await settle(s)
        await s.wait_dispatched(r.end_offset, 60)
        self.setup_s = time.perf_counter() - t0
        return s

    async def __aexit__(self, *exc) -> None:
        try:
            await self.store.close()
        finally:
            if not self.keep:
                shutil.rmtree(self.dir, ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


async def settle(store: MessageStore) -> None:
    """Wait for the commit log's background segment pre-allocation, if one is running."""
    ahead = store.commit_log.queue._ahead  # AllocateMappedFileService's thread (private; bench only)
    if ahead is not None and ahead.is_alive():
        await asyncio.to_thread(ahead.join)


def segment_left(store: MessageStore) -> int:
    """Bytes the current segment still has room for (minus a margin)."""
    wrote = store.commit_log.wrote
    return max(0, (wrote - wrote % SEGMENT) + SEGMENT_BUDGET - wrote)


# ------------------------------------------------------------------------------------ cell results

@dataclass
class Result:
    name: str
    figures: dict = field(default_factory=dict)

    def line(self) -> str:
        f = self.figures
        parts = []
        for k in ("msgs_per_s", "MBps", "p50_us", "p99_us", "records_per_s"):
            if k in f:
                v = f[k]
                parts.append(f"{k}={v:,.0f}" if v >= 100 else f"{k}={v:.1f}")
        return f"{self.name}: " + " ".join(parts)


def _throughput(n: int, body: int, elapsed: float) -> dict:
    rec = record_size(body)
    return {
        "messages": n, "elapsed_s": elapsed, "body_bytes": body, "record_bytes": rec,
        "msgs_per_s": n / elapsed,
        "MBps": n * rec / elapsed / 1e6,            # stored record bytes
        "body_MBps": n * body / elapsed / 1e6,
    }


# ------------------------------------------------------------------------------------- put cells

async def put_single_async(store: MessageStore, body_len: int, seconds: float) -> dict:
    """One task: `await store.put(...)` in a tight loop (never suspends under ASYNC_FLUSH)."""
    body = os.urandom(body_len)
    put = store.put
    limit = segment_left(store) // record_size(body_len)
    step = 1024
    for _ in range(step):  # warm the code path
        await put(TOPIC, 0, body, PROPS)
    limit -= step
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while n + step <= limit:
        for _ in range(step):
            await put(TOPIC, 0, body, PROPS)
        n += step
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    out = _throughput(n, body_len, elapsed)
    out["stopped_by"] = "time" if elapsed >= seconds else "segment budget"
    return out


async def put_batch_async(store: MessageStore, body_len: int, seconds: float, batch: int) -> dict:
    body = os.urandom(body_len)
    bodies = [body] * batch
    put_batch = store.put_batch
    limit = segment_left(store) // (record_size(body_len) * batch)
    for _ in range(8):
        await put_batch(TOPIC, 0, bodies, PROPS)
    limit -= 8
    calls = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while calls < limit:
        await put_batch(TOPIC, 0, bodies, PROPS)
        calls += 1
        if calls % 16 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t0
    out = _throughput(calls * batch, body_len, elapsed)
    out["batch"] = batch
    out["stopped_by"] = "time" if elapsed >= seconds else "segment budget"
    return out


async def _concurrent(store: MessageStore, tasks: int, seconds: float, limit_msgs: int, one, per_call: int,
                      record_latency: bool) -> dict:
    """`tasks` writers, each looping `await one()` until the deadline or the shared message budget."""
    from broker.store.offset_table import Slot

    table = store.table
    state = {"n": 0, "timeouts": 0}
    lat: list[list[int]] = [[] for _ in range(tasks)]
    flushes: set[int] = set()
    start = asyncio.Event()
    deadline = 0.0

    async def writer(i: int) -> None:
        samples = lat[i]
        pc = time.perf_counter_ns
        await start.wait()
        while state["n"] < limit_msgs:
            t = pc()
            r = await one()
            if record_latency:
                samples.append(pc() - t)
            if r.status is not PutStatus.PUT_OK:
                state["timeouts"] += 1
            state["n"] += per_call
            flushes.add(table.load(Slot.FLUSHED))
            if time.perf_counter() >= deadline:
                break

    ts = [asyncio.create_task(writer(i)) for i in range(tasks)]
    await asyncio.sleep(0)
    f0 = table.load(Slot.FLUSHED)
    t0 = time.perf_counter()
    deadline = t0 + seconds
    start.set()
    await asyncio.gather(*ts)
    elapsed = time.perf_counter() - t0
    flushes.discard(f0)
    out = {"tasks": tasks, "n": state["n"], "elapsed_s": elapsed, "flush_timeouts": state["timeouts"],
           "flushes_observed": len(flushes),
           "msgs_per_flush": state["n"] / max(1, len(flushes))}
    if record_latency:
        all_ns = np.sort(np.concatenate([np.asarray(s, dtype=np.int64) for s in lat]))
        out.update(p50_us=percentile_us(all_ns, 0.50), p99_us=percentile_us(all_ns, 0.99),
                   p999_us=percentile_us(all_ns, 0.999), max_us=float(all_ns[-1]) / 1e3,
                   mean_us=float(all_ns.mean()) / 1e3, samples=int(len(all_ns)))
    return out


async def put_single_sync(store: MessageStore, body_len: int, seconds: float, tasks: int,
                          record_latency: bool = False) -> dict:
    body = os.urandom(body_len)
    limit = segment_left(store) // record_size(body_len)

    def one():
        return store.put(TOPIC, 0, body, PROPS)

    r = await _concurrent(store, tasks, seconds, limit, one, 1, record_latency)
    out = _throughput(r.pop("n"), body_len, r.pop("elapsed_s"))
    out.update(r)
    return out


async def put_batch_sync(store: MessageStore, body_len: int, seconds: float, batch: int, tasks: int) -> dict:
    body = os.urandom(body_len)
    bodies = [body] * batch
    limit = segment_left(store) // record_size(body_len)

    def one():
        return store.put_batch(TOPIC, 0, bodies, PROPS)

    r = await _concurrent(store, tasks, seconds, limit, one, batch, True)
    out = _throughput(r.pop("n"), body_len, r.pop("elapsed_s"))
    out["batch"] = batch
    out.update(r)
    return out


# ------------------------------------------------------------------------------------------ reput

KEYED_POOL = 64  # batches of distinct keyed properties cycled through by the keyed cells


def keyed_props(batch: int, pool: int = KEYED_POOL) -> list[list[bytes]]:
    """Per-message properties as a producer with keys sends them: TAGS, a KEYS token of its own
    and a 32-hex UNIQ_KEY (two index entries per record); `pool` batches of distinct ones."""
    return [[b"TAGS\x01TagA\x02KEYS\x01order-%08d\x02UNIQ_KEY\x01%032X" % (n, n * 2654435761)
             for n in range(b * batch, (b + 1) * batch)] for b in range(pool)]


async def reput_end_to_end(store: MessageStore, records: int, body_len: int, batch: int, keyed: bool = False) -> dict:
    """put_batch `records` records, then wait for the reput service to have dispatched them all:
    records/s from the first write to the last dispatch (the service works while we write).
    keyed: each record carries its own KEYS and UNIQ_KEY (see keyed_props)."""
    from broker.store.offset_table import Slot

    body = os.urandom(body_len)
    bodies = [body] * batch
    calls = records // batch
    props = keyed_props(batch) if keyed else [PROPS]
    t = store.table
    d0 = t.load(Slot.DISPATCHED)
    t0 = time.perf_counter()
    end = 0
    for c in range(calls):
        end = (await store.put_batch(TOPIC, 0, bodies, props[c % len(props)])).end_offset
    tw = time.perf_counter()
    dw = t.load(Slot.DISPATCHED)
    await store.wait_dispatched(end, 300)
    td = time.perf_counter()
    n = calls * batch
    rec = record_size(body_len, props=props[0][0] if keyed else PROPS)
    left = (end - max(dw, d0)) // rec
    return {
        "records": n, "record_bytes": rec, "write_s": tw - t0, "dispatch_done_s": td - t0,
        "records_per_s": n / (td - t0),
        "writer_records_per_s": n / (tw - t0),
        "left_when_writes_ended": int(left),
        "drain_s": td - tw,
        "drain_records_per_s": left / (td - tw) if td > tw and left > 0 else math.nan,
        "end_offset": end,
    }


def reput_kernel(commitlog_dir: str, end: int, cq_dir: str, index_root: str | None = None,
                 untimed_records: int = 0) -> dict:
    """The reput service's loop over a pre-written segment, in-process: Scanner.scan (no CRC,
    8192 records per call) + Dispatcher.dispatch into fresh consume queues, and with `index_root`
    into a fresh index too (default-size index files, 5M slots). Also the scan alone.
    untimed_records: dispatched first, off the clock (an index file already in use: its pages
    mapped, most of its 5M slots touched, as the reput's file is but for its first minutes)."""
    path = os.path.join(commitlog_dir, offset_to_name(0))
    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(SEGMENT,))
    buf = MappedBuffer(mm, False)
    end = min(end, SEGMENT)
    try:
        scanner = Scanner(REPUT_BATCH)

        # scan only: best of 3
        scan_best = math.inf
        n_scan = 0
        for _ in range(3):
            pos = n_scan = 0
            t0 = time.perf_counter()
            while pos < end:
                c, pos, status = scanner.scan(buf, pos, end, 0, False)
                n_scan += c
                if status not in (SCAN_END,) and c == 0:
                    break
            scan_best = min(scan_best, time.perf_counter() - t0)

        # scan + dispatch, as ReputService.reput, into a fresh consume-queue directory
        os.makedirs(cq_dir, exist_ok=True)
        cqs = ConsumeQueueStore(cq_dir, MessageStoreConfig.mappedFileSizeConsumeQueue, writable=True)
        cqs.load()
        index = None
        if index_root is not None:
            index = BuildIndex(MessageStoreConfig(storePathRootDir=index_root))
        dispatcher = Dispatcher(cqs, index=index)
        pos = n = 0
        while n < untimed_records:
            c, pos, status = scanner.scan(buf, pos, end, 0, False, min(REPUT_BATCH, untimed_records - n))
            dispatcher.dispatch(scanner, c, buf)
            n += c
        start, n = pos, 0
        keys0 = index.kernel.keys_indexed if index is not None else 0
        t_scan = t_disp = 0.0
        pc = time.perf_counter
        t0 = pc()
        while pos < end:
            a = pc()
            c, pos, status = scanner.scan(buf, pos, end, 0, False)
            b = pc()
            if c:
                dispatcher.dispatch(scanner, c, buf)
            t_disp += pc() - b
            t_scan += b - a
            n += c
            if status == SCAN_BLANK or (status != SCAN_END and c == 0):
                break
        elapsed = pc() - t0
        cq_files = sum(len(q.files) for q in cqs.queues.values())
        keys = index.kernel.keys_indexed - keys0 if index is not None else 0
        if index is not None:
            index.close()
        cqs.flush()
        cqs.close()
    finally:
        buf.release()
        del mm
    return {
        "records": n, "bytes": end - start, "elapsed_s": elapsed,
        "records_per_s": n / elapsed,
        "scan_s": t_scan, "dispatch_s": t_disp,
        "scan_share_pct": 100 * t_scan / elapsed,
        "scan_only_records_per_s": n_scan / scan_best,
        "scan_only_GBps": end / scan_best / 1e9,
        "cq_files_created": cq_files,
        "index_keys": keys,
    }


# ------------------------------------------------------------------------------------------ driver

async def run_all(workdir: str, settings: Settings, progress) -> dict:
    """Every store cell; `progress(Result)` is called as each finishes. Returns {cell name: figures}."""
    s = settings
    out: dict[str, dict] = {}

    def done(name: str, figures: dict, setup_s: float) -> None:
        figures["store_setup_s"] = setup_s
        out[name] = figures
        progress(Result(name, figures))

    # 2. put throughput
    for flush in (ASYNC_FLUSH, SYNC_FLUSH):
        for body in (128, 1024):
            bs = BenchStore(workdir, flush)
            async with bs as store:
                if flush == ASYNC_FLUSH:
                    f = await put_single_async(store, body, s.cell_seconds)
                else:
                    f = await put_single_sync(store, body, s.cell_seconds, s.sync_put_tasks)
            done(f"put {flush} {_size(body)}", f, bs.setup_s)
            bs = BenchStore(workdir, flush)
            async with bs as store:
                if flush == ASYNC_FLUSH:
                    f = await put_batch_async(store, body, s.cell_seconds, s.batch)
                else:
                    f = await put_batch_sync(store, body, s.cell_seconds, s.batch, s.sync_batch_tasks)
            done(f"put_batch {flush} {_size(body)}", f, bs.setup_s)

    # 3. SYNC_FLUSH latency by number of writers (1 KiB)
    for w in s.latency_writers:
        bs = BenchStore(workdir, SYNC_FLUSH)
        async with bs as store:
            f = await put_single_sync(store, 1024, s.latency_seconds, w, record_latency=True)
        done(f"sync latency {w} writers 1KiB", f, bs.setup_s)

    # 4. reput: end to end while writing, then the kernel path over the same, pre-written segment
    bs = BenchStore(workdir, ASYNC_FLUSH)
    bs.keep = True
    try:
        async with bs as store:
            f = await reput_end_to_end(store, s.reput_records, s.reput_body, s.batch)
            commitlog_dir = store.config.commitlog_dir
            wrote = store.commit_log.wrote
        done(f"reput service end-to-end {_size(s.reput_body)}", f, bs.setup_s)
        f = await asyncio.to_thread(reput_kernel, commitlog_dir, wrote, os.path.join(bs.dir, "bench-cq"))
        done(f"reput kernel scan+dispatch {_size(s.reput_body)}", f, 0.0)
    finally:
        bs.remove()

    # 5. the same with the message index: records with their own KEYS and UNIQ_KEY (two index
    # entries each), the reput service without and with the index, then the kernel path over the
    # written segment without and with it (default-size index files)
    for enabled in (False, True):
        bs = BenchStore(workdir, ASYNC_FLUSH, messageIndexEnable=enabled)
        bs.keep = enabled
        try:
            async with bs as store:
                f = await reput_end_to_end(store, s.reput_records, s.reput_body, s.batch, keyed=True)
                commitlog_dir = store.config.commitlog_dir
                wrote = store.commit_log.wrote
            done(f"reput service end-to-end keyed, index {'on' if enabled else 'off'} {_size(s.reput_body)}", f,
                 bs.setup_s)
            if enabled:
                f = await asyncio.to_thread(reput_kernel, commitlog_dir, wrote, os.path.join(bs.dir, "bench-cq"))
                done(f"reput kernel scan+dispatch keyed, no index {_size(s.reput_body)}", f, 0.0)
                f = await asyncio.to_thread(reput_kernel, commitlog_dir, wrote, os.path.join(bs.dir, "bench-cq2"),
                                            os.path.join(bs.dir, "bench-index"))
                done(f"reput kernel scan+dispatch+index keyed, fresh index {_size(s.reput_body)}", f, 0.0)
                f = await asyncio.to_thread(reput_kernel, commitlog_dir, wrote, os.path.join(bs.dir, "bench-cq3"),
                                            os.path.join(bs.dir, "bench-index2"), s.reput_records // 2)
                done(f"reput kernel scan+dispatch+index keyed, index in use (second half) {_size(s.reput_body)}", f,
                     0.0)
        finally:
            bs.remove()
    return out


def _size(n: int) -> str:
    return f"{n // 1024}KiB" if n % 1024 == 0 else f"{n}B"


# ------------------------------------------------------------------------- one cell, for profiling

def _cli() -> None:
    """Run one cell (e.g. under py-spy):
        python -m bench.store_bench put_batch --flush ASYNC_FLUSH --body 1024
        python -m bench.store_bench sync --tasks 64 --seconds 5
        python -m bench.store_bench reput
    """
    import argparse

    p = argparse.ArgumentParser(prog="python -m bench.store_bench", description=_cli.__doc__)
    p.add_argument("cell", choices=("put", "put_batch", "sync", "reput"))
    p.add_argument("--flush", default=ASYNC_FLUSH, choices=(ASYNC_FLUSH, SYNC_FLUSH))
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--workdir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    a = p.parse_args()
    os.environ.setdefault("BROKER_LOG_LEVEL", "WARNING")
    os.makedirs(a.workdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".work-", dir=a.workdir)

    async def go() -> dict:
        flush = SYNC_FLUSH if a.cell == "sync" else a.flush
        bs = BenchStore(work, flush)
        async with bs as store:
            print(f"store ready (setup {bs.setup_s:.1f} s); broker pid {os.getpid()}, services "
                  f"{store.service_pids()}", flush=True)
            if a.cell == "put":
                if flush == ASYNC_FLUSH:
                    return await put_single_async(store, a.body, a.seconds)
                return await put_single_sync(store, a.body, a.seconds, a.tasks, record_latency=True)
            if a.cell == "put_batch":
                if flush == ASYNC_FLUSH:
                    return await put_batch_async(store, a.body, a.seconds, a.batch)
                return await put_batch_sync(store, a.body, a.seconds, a.batch, a.tasks)
            if a.cell == "sync":
                return await put_single_sync(store, a.body, a.seconds, a.tasks, record_latency=True)
            r = await reput_end_to_end(store, a.records, a.body, a.batch)
            bs.keep = True
            r["kernel"] = await asyncio.to_thread(reput_kernel, store.config.commitlog_dir, store.commit_log.wrote,
                                                  os.path.join(work, "bench-cq"))
            return r

    try:
        import uvloop
        res = uvloop.run(go())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for k, v in res.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    _cli()
