"""DLedger mode set-ups: a name server and three `broker serve -c broker.conf` processes with the
same brokerName and `enableDLegerCommitLog=true`, on loopback with free ports, and what the
tests read back from them (routes, runtime info, the consume queues and the DLedger files)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from broker.kernels.codec import CQ_UNIT_SIZE
from tests.conftest import free_port, wait_for
from tests.helpers.ha_cluster import SEGMENT, Broker, NameServer

GROUP = "broker-a"
# short Raft intervals: a dead leader is noticed in 3 x 200 ms
FAST_RAFT = "heartBeatTimeIntervalMs=200\nmaxHeartBeatLeak=3\nminVoteIntervalMs=100\nmaxVoteIntervalMs=300\n"


class DLedgerGroup:
    def __init__(self, root: Path, n: int = 3, extra: str = ""):
        self.root = root
        self.namesrv = NameServer(root)
        self.peer_ports = [free_port() for _ in range(n)]
        self.ids = [f"n{i}" for i in range(n)]
        peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(self.ids, self.peer_ports))
        self.brokers: dict[str, Broker] = {}
        for sid in self.ids:
            conf = (f"enableDLegerCommitLog=true\ndLegerGroup={GROUP}\ndLegerPeers={peers}\ndLegerSelfId={sid}\n"
                    f"{FAST_RAFT}{extra}")
            self.brokers[sid] = Broker(root, sid, self.namesrv.addr, "ASYNC_MASTER", 0, conf)

    def start(self) -> "DLedgerGroup":
        for b in self.brokers.values():
            b.start()
        return self

    def stop(self) -> None:
        for b in self.brokers.values():
            try:
                b.stop()
            except Exception:
                b.kill9()
        self.namesrv.stop()

    def alive(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b.child is not None and b.child.proc.poll() is None]

    # -- what the name server says -------------------------------------------------------------
    def broker_addrs(self, topic: str) -> dict[int, str]:
        route = self.namesrv.route(topic)
        if not route:
            return {}
        for bd in route["brokerDatas"]:
            if bd["brokerName"] == GROUP:
                return {int(k): v for k, v in bd["brokerAddrs"].items()}
        return {}

    def wait_master(self, topic: str, timeout: float = 60, exclude: Broker | None = None) -> Broker:
        """The broker registered as brokerId 0 for `topic` (and saying it is the master)."""
        def master():
            addr = self.broker_addrs(topic).get(0)
            for b in self.alive():
                if b is not exclude and addr == f"127.0.0.1:{b.port}" and b.info().get("brokerRole") == "SYNC_MASTER":
                    return b
            return None
        return wait_for(master, timeout, f"a master of {topic} registered as brokerId 0")

    def leader(self, timeout: float = 60) -> Broker:
        """The broker serving as master (its own word), before any topic exists."""
        return wait_for(lambda: next((b for b in self.alive() if b.info().get("brokerRole") == "SYNC_MASTER"), None),
                        timeout, "a broker serving as DLedger master")


def consume_queue(broker: Broker, topic: str, queue_id: int) -> np.ndarray:
    """The consume queue's entries on disk up to the first empty one: (phys, size, tag) rows."""
    d = broker.store / "consumequeue" / topic / str(queue_id)
    if not d.exists():
        return np.zeros(0, dtype=">i8,>i4,>i8")
    data = b"".join(p.read_bytes() for p in sorted(d.iterdir()) if p.name.isdigit())
    arr = np.frombuffer(data[:len(data) - len(data) % CQ_UNIT_SIZE], dtype=np.dtype([("phys", ">i8"), ("size", ">i4"),
                                                                                      ("tag", ">i8")]))
    empty = np.flatnonzero(arr["size"] == 0)
    return arr[:empty[0]] if len(empty) else arr


def data_dir(broker: Broker) -> Path:
    return broker.store / f"dledger-{broker.name}" / "data"


__all__ = ["DLedgerGroup", "consume_queue", "data_dir", "SEGMENT", "wait_for"]
