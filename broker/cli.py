"""`broker` console script: `serve` runs the broker, `namesrv` a name server, `run` both (make run)."""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from broker.client import cli as client_cli
from broker.conf import read_properties
from broker.server.plain_access_validator import default_acl_file
from broker.server.broker_config import load_broker_config, load_dledger_config
from broker.store.errors import StoreError

log = logging.getLogger("broker")


async def _serve(args: argparse.Namespace) -> int:
    props = read_properties(args.config) if args.config else {}
    if args.store_root:
        props["storePathRootDir"] = os.path.abspath(args.store_root)
    if not props.get("aclFile"):
        props["aclFile"] = default_acl_file(args.config)
    broker_config, store_config, unknown = load_broker_config(props)
    for key in unknown:
        log.warning("%s: unknown key in %s, ignored", key, args.config)
    from broker.server.broker_controller import BrokerController  # after config errors are reported

    dledger = load_dledger_config(props) if store_config.enableDLegerCommitLog else None
    front = None
    if broker_config.grpcServerPort:  # local mode: the gRPC front in this process, on its own port
        from broker.proxy.local_mode import LocalGrpcFront
        front = LocalGrpcFront(broker_config, store_config.brokerIP1)  # refuses a port taken, naming the key
    controller = BrokerController(broker_config, store_config, host=store_config.brokerIP1, dledger=dledger)
    await controller.start()
    # before the "listening on" line: a SIGTERM right after it (from a test or a supervisor that
    # waited for it) stops the broker cleanly, not by the signal's default action
    stop = _stop_requested()
    # What start-up made (modules, tables, maps) lives as long as the broker: out of the collector's
    # way, and collections rarer. A pull makes hundreds of short-lived views (freed by refcount,
    # no cycles); with the defaults the collector rescanned the whole heap every few hundred pulls
    # (14 % of the broker's time under loadgen's pull cell).
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 50, 100)
    if front is not None:
        try:
            await front.start(controller.server, controller.addr, controller.acl)
            controller.front_metrics = front.metrics_rows  # its clients in the broker's metrics
        except BaseException:
            await controller.close()
            raise
    store = controller.store
    print(f"broker {broker_config.brokerName} ({broker_config.brokerClusterName}) listening on {controller.addr}; "
          f"store {store_config.storePathRootDir} "
          f"({store_config.flushDiskType}); name servers {broker_config.namesrv_addrs or 'none'}", flush=True)
    loop = asyncio.get_running_loop()
    # Quiet unless asked: `broker admin status` answers on demand; --status-interval logs a line.
    interval = args.status_interval or None
    last, at = controller.metrics.snapshot(), loop.time()
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            now = loop.time()
            log.info("status: %s", controller.metrics.status_line(last, now - at))
            last, at = controller.metrics.snapshot(), now
    print("stopping: waiting for flush and reput to finish", flush=True)
    if front is not None:
        await front.stop()
    await controller.close()
    print("stopped cleanly", flush=True)
    return 0


def _proxy(args: argparse.Namespace) -> int:
    """`broker proxy -c proxy.conf`: the gRPC front, finding brokers through namesrvAddr."""
    from broker.proxy.config import load_proxy_config
    from broker.proxy.startup import run

    try:
        config, unknown = load_proxy_config(args.config, {"namesrvAddr": args.namesrv_addr} if args.namesrv_addr else None)
    except (StoreError, OSError) as e:
        print(f"broker proxy: {e}", file=sys.stderr)
        return 2
    for key in unknown:
        log.warning("%s: unknown key in %s, ignored", key, args.config)
    return run(config)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _stop_requested() -> asyncio.Event:
    """Set on SIGINT/SIGTERM; installed before anything starts, so a signal during start-up (a
    controller replaying its log) stops the process cleanly instead of killing it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _namesrv(args: argparse.Namespace) -> int:
    """`broker namesrv [-c namesrv.conf] [--listen HOST:PORT]`: a name server and, with
    enableControllerInNamesrv=true in the file, a controller in the same process on its own
    controllerDLegerPeers address (RocketMQ 5's NamesrvStartup); both stop together."""
    from broker.namesrv.config import load_namesrv_config
    from broker.namesrv.server import NamesrvController

    overrides = {}  # the flags win over the file
    if args.listen:
        overrides["bindAddress"], overrides["listenPort"] = args.listen[0], str(args.listen[1])
    if args.auto_create_topic:
        overrides["autoCreateTopicEnable"] = args.auto_create_topic
    config, controller_config = load_namesrv_config(args.config, overrides)
    stop = _stop_requested()
    namesrv = NamesrvController(config)
    await namesrv.start()
    try:
        print(f"name server listening on {namesrv.addr}", flush=True)
        if controller_config is None:
            await stop.wait()
        else:
            from broker.controller.startup import listening_line, running_controller  # the Raft core: only if used
            async with running_controller(controller_config) as controller:
                print(listening_line(controller), flush=True)
                await stop.wait()
            print("controller stopped", flush=True)
    finally:
        await namesrv.close()
    print("name server stopped", flush=True)
    return 0


async def _controller(args: argparse.Namespace) -> int:
    """`broker controller -c controller.conf`: one member of the controllers' Raft group, answering
    brokers on its own controllerDLegerPeers address (RocketMQ's ControllerStartup)."""
    from broker.controller.config import load_controller_config
    from broker.controller.startup import listening_line, running_controller

    config, unknown = load_controller_config(args.config)
    for key in unknown:
        log.warning("%s: unknown key in %s, ignored", key, args.config)
    stop = _stop_requested()
    async with running_controller(config) as controller:
        print(listening_line(controller), flush=True)
        await stop.wait()
    print("controller stopped", flush=True)
    return 0


async def _run(args: argparse.Namespace) -> int:
    """`make run`: a name server and a broker registered with it, as two child processes, stopped
    together on SIGINT/SIGTERM; if either dies the other is stopped and the exit status is 1."""
    import ctypes
    import tempfile

    ns_host, ns_port = args.namesrv_listen
    namesrv_addr = f"{'127.0.0.1' if ns_host in ('0.0.0.0', '') else ns_host}:{ns_port}"
    libc = ctypes.CDLL(None, use_errno=True)

    def die_with_us() -> None:  # a `run` killed by SIGKILL must not leave a broker holding the store
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG

    # `serve` takes its settings from a broker.conf: the two that tie it to this name server
    with tempfile.NamedTemporaryFile("w", prefix="broker-run-", suffix=".conf", delete=False) as conf:
        conf.write(f"namesrvAddr={namesrv_addr}\nlistenPort={args.listen_port}\nbrokerIP1={args.broker_ip}\n"
                   f"grpcServerPort={args.grpc_port}\n")
    me = [sys.executable, "-m", "broker.cli"]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    children: dict[str, asyncio.subprocess.Process] = {}
    died: list[str] = []
    try:
        ns = children["name server"] = await asyncio.create_subprocess_exec(
            *me, "namesrv", "--listen", f"{ns_host}:{ns_port}", preexec_fn=die_with_us)
        # The broker registers at start and then only every 30 s: it starts once the name server
        # listens. Another process's socket has no wake-up to wait on, so this polls, bounded.
        deadline = loop.time() + 10
        while ns.returncode is None and not stop.is_set():
            try:
                _, w = await asyncio.open_connection(namesrv_addr.rpartition(":")[0], ns_port)
                w.close()
                break
            except OSError:
                if loop.time() > deadline:
                    print(f"broker run: no name server listening on {namesrv_addr} after 10 s", file=sys.stderr)
                    return 1
                await asyncio.sleep(0.05)
        if ns.returncode is None and not stop.is_set():
            children["broker"] = await asyncio.create_subprocess_exec(
                *me, "serve", "-c", conf.name, "--store-root", args.store_root,
                "--status-interval", str(args.status_interval), preexec_fn=die_with_us)
        waits = {asyncio.ensure_future(p.wait()): name for name, p in children.items()}
        stopping = asyncio.ensure_future(stop.wait())
        done, _ = await asyncio.wait([stopping, *waits], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        died = [waits[t] for t in done if t in waits]
        for name in died:
            print(f"broker run: the {name} exited with status {children[name].returncode}; stopping the rest",
                  file=sys.stderr, flush=True)
    finally:
        status = await _stop_children(children)
        os.unlink(conf.name)
    return 1 if died else status


async def _stop_children(children: dict) -> int:
    """The broker first (it unregisters from the name server on the way out), then the name
    server; each gets SIGTERM and 30 s before SIGKILL. Returns 0 if every child exited cleanly."""
    status = 0
    for name in ("broker", "name server"):
        proc = children.get(name)
        if proc is None:
            continue
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except asyncio.TimeoutError:
                print(f"broker run: the {name} did not stop within 30 s; killing it", file=sys.stderr)
                proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="broker", description="RocketMQ-compatible message broker")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the broker: remoting server, store, flush and reput services")
    s.add_argument("-c", "--config", help="broker.conf (RocketMQ's keys)")
    s.add_argument("--store-root", help="storePathRootDir (overrides the file)")
    s.add_argument("--status-interval", type=float, default=0.0, metavar="SECONDS",
                   help="log a one-line status (sizes, rates, disk, slaves) every SECONDS; 0 (default): never")
    n = sub.add_parser("namesrv", help="run a name server: brokers register, clients ask for routes")
    n.add_argument("-c", "--config", help="namesrv.conf (RocketMQ's keys: listenPort, bindAddress, "
                   "scanNotActiveBrokerInterval, enableControllerInNamesrv and then the controller's keys)")
    n.add_argument("--listen", type=_host_port, metavar="HOST:PORT",
                   help="address to listen on, over the file's bindAddress/listenPort (default 127.0.0.1:9876)")
    n.add_argument("--auto-create-topic", choices=("true", "false"),
                   help="autoCreateTopicEnable: answer routes for unknown topics to brokers holding TBW102 "
                   "(default true)")
    c = sub.add_parser("controller", help="run a controller: elects the master of each broker group (RocketMQ 5)")
    c.add_argument("-c", "--config", required=True, help="controller.conf (RocketMQ's keys: controllerDLegerGroup, "
                   "controllerDLegerPeers, controllerDLegerSelfId, controllerStorePath, ...)")
    x = sub.add_parser("proxy", help="run the gRPC front for RocketMQ 5.x clients (RocketMQ 5's proxy, cluster mode)")
    x.add_argument("-c", "--config", help="proxy.conf (RocketMQ's ProxyConfig keys: namesrvAddr, grpcServerPort, "
                   "maxMessageSize, ...)")
    x.add_argument("-n", "--namesrv-addr", help="namesrvAddr (over the file's)")
    r = sub.add_parser("run", help="run a name server and a broker registered with it (make run)")
    r.add_argument("--store-root", default="./data", help="the broker's storePathRootDir (default ./data)")
    r.add_argument("--namesrv-listen", type=_host_port, default=("127.0.0.1", 9876), metavar="HOST:PORT",
                   help="the name server's address (default 127.0.0.1:9876)")
    r.add_argument("--listen-port", type=int, default=10911, help="the broker's listenPort (default 10911)")
    r.add_argument("--grpc-port", type=int, default=8081,
                   help="grpcServerPort: the gRPC front for 5.x clients, in the broker (default 8081; 0: none)")
    r.add_argument("--broker-ip", default="127.0.0.1", help="brokerIP1: the address clients are routed to")
    r.add_argument("--status-interval", type=float, default=0.0, metavar="SECONDS",
                   help="the broker logs a one-line status every SECONDS; 0 (default): never")
    client_cli.add_commands(sub)  # produce, consume, admin
    args = p.parse_args(argv)
    if client_cli.handles(args):
        return client_cli.run(args)
    logging.basicConfig(level=os.environ.get("BROKER_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(name)s[%(process)d] %(levelname)s %(message)s")
    if args.cmd == "proxy":  # grpc.aio keeps to asyncio's own loop
        return _proxy(args)
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency
        runner = asyncio.run
    try:
        return runner({"serve": _serve, "namesrv": _namesrv, "controller": _controller, "run": _run}[args.cmd](args))
    except (StoreError, OSError) as e:
        print(f"broker: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
