"""`broker` console script: `serve` runs the broker, `namesrv` a name server."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from broker.conf import read_properties
from broker.remoting.broker_config import load_broker_config
from broker.store.errors import StoreError

log = logging.getLogger("broker")


async def _serve(args: argparse.Namespace) -> int:
    props = read_properties(args.config) if args.config else {}
    if args.store_root:
        props["storePathRootDir"] = os.path.abspath(args.store_root)
    if args.config and not props.get("aclFile"):
        beside = os.path.join(os.path.dirname(os.path.abspath(args.config)), "plain_acl.yml")
        if os.path.exists(beside) or not os.environ.get("ROCKETMQ_HOME"):
            props["aclFile"] = beside  # RocketMQ's conf/ holds both files
    broker_config, store_config, unknown = load_broker_config(props)
    for key in unknown:
        log.warning("%s: unknown key in %s, ignored", key, args.config)
    from broker.remoting.broker_controller import BrokerController  # after config errors are reported

    controller = BrokerController(broker_config, store_config, host=store_config.brokerIP1)
    await controller.start()
    store = controller.store
    print(f"broker {broker_config.brokerName} listening on {controller.addr}; store {store_config.storePathRootDir} "
          f"({store_config.flushDiskType}); name servers {broker_config.namesrv_addrs or 'none'}", flush=True)
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
    await controller.close()
    print("stopped cleanly", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="broker", description="RocketMQ-compatible message broker")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the broker: remoting server, store, flush and reput services")
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
