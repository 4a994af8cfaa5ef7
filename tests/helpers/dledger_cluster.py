"""DLedger mode set-ups: a name server and three (or more) `broker serve -c broker.conf` processes
with the same brokerName and `enableDLegerCommitLog=true`, on loopback with free ports, and what
the tests read back from them (routes, runtime info, the consume queues and the DLedger files).

With `proxied=True` every member reaches each other member through its own loopback Proxy (the
HA fault tests' one): member i's dLegerPeers names itself at its real peer port and member j at
the port of the proxy i -> j. A DLedger member listens on its own entry's port and knows its peers
by id only (votes, heartbeats and pushes name ids, never addresses), so the peer strings may
differ from member to member. `isolate(b)` cuts both directions of every link of b while its
client port and the name server stay reachable: a network partition of the Raft traffic alone.

With `hosts` (tests/helpers/netns.Hosts with a host "ns" and one per member id) the name server
and each member run in a network namespace of their own, at that host's address: the faults are
then the hosts' (packet drops), not the proxies'."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np

from broker.kernels.codec import CQ_UNIT_SIZE
from tests.conftest import free_port, wait_for
from tests.helpers.ha_cluster import SEGMENT, Broker, NameServer, Proxy

GROUP = "broker-a"
# short Raft intervals: a dead leader is noticed in 3 x 200 ms
FAST_RAFT = "heartBeatTimeIntervalMs=200\nmaxHeartBeatLeak=3\nminVoteIntervalMs=100\nmaxVoteIntervalMs=300\n"


class DLedgerGroup:
    def __init__(self, root: Path, n: int = 3, extra: str = "", proxied: bool = False, hosts=None):
        assert not (proxied and hosts), "proxies on loopback or hosts of their own, not both"
        self.root, self.hosts = root, hosts
        self.namesrv = NameServer(root, **self._placed("ns"))
        self.peer_ports = [free_port() for _ in range(n)]
        self.ids = [f"n{i}" for i in range(n)]
        port = dict(zip(self.ids, self.peer_ports))
        ip = {i: self._placed(i).get("host", "127.0.0.1") for i in self.ids}
        # (from, to) -> the proxy `from` reaches `to` through
        self.links: dict[tuple[str, str], Proxy] = {
            (a, b): Proxy(port[b]) for a in self.ids for b in self.ids if proxied and a != b}
        self.brokers: dict[str, Broker] = {}
        self.frozen: set[str] = set()
        for sid in self.ids:
            peers = ";".join(f"{i}-{ip[i]}:{self.links[sid, i].port if (sid, i) in self.links else port[i]}"
                             for i in self.ids)
            conf = (f"enableDLegerCommitLog=true\ndLegerGroup={GROUP}\ndLegerPeers={peers}\ndLegerSelfId={sid}\n"
                    f"{FAST_RAFT}{extra}")
            self.brokers[sid] = Broker(root, sid, self.namesrv.addr, "ASYNC_MASTER", 0, conf, **self._placed(sid))

    def _placed(self, name: str) -> dict:
        """Where process `name` runs: its host's address and `ip netns exec` prefix, or loopback."""
        return {"host": self.hosts.addr[name], "wrap": self.hosts.wrap(name)} if self.hosts else {}

    def start(self) -> "DLedgerGroup":
        """Every member started, or none left running: a member that does not come up (a port
        taken meanwhile) stops the ones started before it and the name server, since a test that
        calls start() before its try block would otherwise leave them running after it fails."""
        try:
            for b in self.brokers.values():
                b.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in list(self.frozen):
            self.thaw(self.brokers[name])
        for b in self.brokers.values():
            try:
                b.stop()
            except Exception:
                b.kill9()
        self.namesrv.stop()
        for p in self.links.values():
            p.close()

    # -- faults ----------------------------------------------------------------------------------
    def _links_of(self, b: Broker) -> list[Proxy]:
        assert self.links, "a partition needs DLedgerGroup(proxied=True)"
        return [p for (x, y), p in self.links.items() if b.name in (x, y)]

    def isolate(self, b: Broker, how: str = "cut") -> None:
        """Partition `b` from every other member, both ways: "cut" closes the links and refuses new
        ones (a peer that is gone), "stall" leaves them open and silent (a network that drops)."""
        for p in self._links_of(b):
            getattr(p, how)()

    def heal(self) -> None:
        for p in self.links.values():
            p.heal()

    def freeze(self, b: Broker) -> None:
        """SIGSTOP the broker's whole process group (its services too): a paused VM, a long GC.
        It is not alive() until thawed (asking it anything would wait for the thaw)."""
        os.killpg(b.child.proc.pid, signal.SIGSTOP)
        self.frozen.add(b.name)

    def thaw(self, b: Broker) -> None:
        os.killpg(b.child.proc.pid, signal.SIGCONT)
        self.frozen.discard(b.name)

    @staticmethod
    def wipe(b: Broker) -> None:
        """The stopped broker's store directory, gone (a replaced disk)."""
        assert b.child is None or b.child.proc.poll() is not None, f"{b.name} still runs"
        shutil.rmtree(b.store)

    def alive(self) -> list[Broker]:
        return [b for b in self.brokers.values()
                if b.child is not None and b.child.proc.poll() is None and b.name not in self.frozen]

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
                if b is not exclude and addr == b.addr and b.info().get("brokerRole") == "SYNC_MASTER":
                    return b
            return None
        return wait_for(master, timeout, f"a master of {topic} registered as brokerId 0")

    def wait_follows(self, b: Broker, leader: Broker, timeout: float = 30) -> None:
        """Until `b`'s DLedger member follows `leader` (its own word)."""
        wait_for(lambda: (lambda i: i["dLedgerRole"] == "FOLLOWER" and i["dLedgerLeader"] == leader.name)(b.info()),
                 timeout, f"{b.name} to follow {leader.name}")

    def leader(self, timeout: float = 60, among: list[Broker] | None = None) -> Broker:
        """The broker serving as master (its own word), before any topic exists; only one of
        `among` if given (the majority's side of a partition)."""
        return wait_for(lambda: next((b for b in (among or self.alive()) if b.info().get("brokerRole") == "SYNC_MASTER"),
                                     None), timeout, "a broker serving as DLedger master")


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
