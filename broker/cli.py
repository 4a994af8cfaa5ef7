"""`broker` console script. Until the remoting issue lands, `serve` runs the store and its services."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from broker.conf import load_store_config
from broker.store.errors import StoreError

log = logging.getLogger("broker")


async def _serve(args: argparse.Namespace) -> int:
    overrides = {"storePathRootDir": os.path.abspath(args.store_root)} if args.store_root else {}
    config = load_store_config(args.config, overrides)
    from broker.services.message_store import MessageStore  # after config errors are reported

    store = MessageStore(config)
    await store.start()
    print(f"store {config.storePathRootDir} up ({config.flushDiskType}, segment "
          f"{config.mappedFileSizeCommitLog} bytes); services {store.service_pids()}", flush=True)
    last = store.offsets()
    print(f"offsets {last}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), args.status_interval)
        except asyncio.TimeoutError:
            now = store.offsets()
            if now != last:
                print(f"offsets {now}", flush=True)
                last = now
    print("stopping: waiting for flush and reput to finish", flush=True)
    await store.close()
    print("stopped cleanly", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="broker", description="RocketMQ-compatible message broker")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the broker (for now: the store with its flush and reput services)")
    s.add_argument("-c", "--config", help="broker.conf (RocketMQ's keys)")
    s.add_argument("--store-root", help="storePathRootDir (overrides the file)")
    s.add_argument("--status-interval", type=float, default=10.0, help="seconds between offset lines")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("BROKER_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        runner = asyncio.run
    try:
        return runner(_serve(args))
    except (StoreError, OSError) as e:
        print(f"broker: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
