"""DLedger mode's figures (issue 17): a group of three `broker serve` members on loopback.

    python -m bench.dledger_bench [--seconds S] [--kills N] [--workdir DIR]
    python -m bench.dledger_bench --beside-sync-master N   # the throughput against SYNC_MASTER, N runs

- **throughput**: the project's client (`Producer.send`, 1 KiB, 64 in flight) against the group,
  routed by a name server: msgs/s, p50/p99 per send, and the CPU-µs per message of each member.
  Read it beside the mode matrix's SYNC_MASTER + slave row of the same `make bench` run.
- **outage**: the write outage after a kill -9 of the leader, as a client sees it: four senders
  send without pause through the project's client; the outage of one kill is from the last
  SEND_OK before the kill to the first SEND_OK after it that a live member stored (the new leader;
  its offsetMsgId names it), also timed from the kill. The killed member is restarted and the next
  kill waits for a leader again. Measured with DLedger's defaults (heartBeatTimeIntervalMs=2000,
  maxHeartBeatLeak=3) and with heartBeatTimeIntervalMs=500; min, p50 and max over the kills.
  The group, the cells and their measurement are bench/failover.py's, shared with
  bench/controller_bench.py.
- **beside SYNC_MASTER** (`--beside-sync-master N`, nothing else): the two figures issue 31's
  target compares (DLedger >= 0.8x SYNC_MASTER), N times: the mode matrix's ASYNC_FLUSH
  SYNC_MASTER + slave cell as `make bench` runs it (1 KiB, 64 in flight, the project's client, 2 s),
  then the throughput cell above; msgs/s, the ratio, CPU-us per message of each process tree.
"""
from __future__ import annotations

import sys

from bench import failover
from bench.failover import Member
from bench.processes import NamesrvProcess, free_port

GROUP = "RaftNode00"
BROKER_NAME = "broker-dl"
TOPIC = "DLedgerBench"
BODY = failover.BODY


class Group(failover.Group):
    """Three members with RocketMQ's DLedger keys; the master is the member that says SYNC_MASTER."""

    what = "DLedger"
    master_word = "leader"

    def __init__(self, workdir: str, namesrv: str, extra: str = "", n: int = 3):
        ports = [free_port() for _ in range(n)]
        peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
        super().__init__([Member(workdir, f"n{i}", BROKER_NAME, namesrv,
                                 f"enableDLegerCommitLog=true\ndLegerGroup={GROUP}\ndLegerPeers={peers}\n"
                                 f"dLegerSelfId=n{i}\n{extra}") for i in range(n)])

    def is_master(self, status: dict) -> bool:
        return status.get("brokerRole") == "SYNC_MASTER"


async def throughput_cell(namesrv: str, group: Group, seconds: float, in_flight: int = failover.IN_FLIGHT) -> dict:
    return await failover.throughput_cell(namesrv, group, seconds, TOPIC, "dledger_bench", in_flight)


async def outage_cell(namesrv: str, group: Group, kills: int, progress=print) -> dict:
    """`kills` kill -9s of the leader under four continuous senders; the outage of each."""
    return await failover.outage_cell(namesrv, group, kills, TOPIC, "dledger_outage", progress)


CONFIGS = {"defaults": "", "heartbeat 500 ms": "heartBeatTimeIntervalMs=500\n"}


async def run_all(seconds: float, kills: int, workdir: str, progress=print) -> dict:
    out: dict = {"outage": {}}
    with NamesrvProcess() as ns:
        with Group(workdir, ns.addr) as g:
            progress("  throughput (Producer.send, 1 KiB, 64 in flight, defaults)")
            out["throughput"] = t = await throughput_cell(ns.addr, g, seconds)
            progress("    " + failover.throughput_line(t))
    for name, extra in CONFIGS.items():
        with NamesrvProcess() as ns:
            with Group(workdir, ns.addr, extra) as g:
                progress(f"  outage after kill -9 of the leader, {name}")
                out["outage"][name] = o = await outage_cell(ns.addr, g, kills, progress)
                progress("    " + failover.outage_line(o))
    return out


async def beside_sync_master(seconds: float, runs: int, workdir: str, progress=print) -> list[dict]:
    """`runs` times the matrix's SYNC_MASTER cell, then the throughput cell; one dict per run."""
    from bench import matrix
    out = []
    for _ in range(runs):
        plan = matrix.Plan.make(False, None, peers=False)
        plan.consume, plan.raw = False, []
        sends, _, _ = await matrix.run_mode("ASYNC_FLUSH", "SYNC_MASTER", [(BODY, failover.IN_FLIGHT)], plan,
                                            workdir, matrix.Progress(1), lambda *_: None)
        sm = next(iter(sends.values()))
        with NamesrvProcess() as ns:
            with Group(workdir, ns.addr) as g:
                t = await throughput_cell(ns.addr, g, seconds)
        cpu = sm["cpu_s_per_M"]
        r = {"sync_master_msgs_per_s": sm["msgs_per_s"], "dledger_msgs_per_s": t["msgs_per_s"],
             "ratio": t["msgs_per_s"] / sm["msgs_per_s"], "dledger_p99_us": t["p99_us"],
             "sync_master_cpu_us_per_msg": {"master": sum(v for k, v in cpu.items() if k.startswith("master")),
                                            "slave": sum(v for k, v in cpu.items() if k.startswith("slave")),
                                            "client": cpu.get("client (bench)", 0.0)},
             "dledger_cpu_us_per_msg": t["cpu_us_per_msg"]}
        progress(f"SYNC_MASTER {r['sync_master_msgs_per_s']:,.0f} msgs/s (CPU-us/msg "
                 + ", ".join(f"{k} {v:.1f}" for k, v in r["sync_master_cpu_us_per_msg"].items())
                 + f"); DLedger {failover.throughput_line(t)}; {r['ratio']:.2f}x")
        out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    _, args = failover.cli(__doc__, argv, lambda ap: ap.add_argument("--beside-sync-master", type=int, default=0,
                                                                      metavar="N"))
    if args.beside_sync_master:
        return failover.run_in_workdir("dledger-bench-", args.workdir, lambda workdir: beside_sync_master(
            args.seconds, args.beside_sync_master, workdir))
    return failover.run_in_workdir("dledger-bench-", args.workdir,
                                   lambda workdir: run_all(args.seconds, args.kills, workdir))


if __name__ == "__main__":
    sys.exit(main())
