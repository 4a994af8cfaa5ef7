"""The processes under soak: a DLedger group of three members (broker-a, its Raft links through
loopback proxies so that a member can be cut off) with the name server it starts, a master/slave
group (broker-b, SYNC_MASTER, the slave's HA link through a proxy) registered there too, and the
gRPC front (`broker proxy`) before them for the 5.x client.

broker-b's master keeps its store on a size-limited tmpfs (the disk-full fault fills it) and runs
under the fdatasync shim of tests/faults/fsync_fault.c (the fsync fault arms it); both need root
(the mount) and gcc, and are left out otherwise."""
from __future__ import annotations

import os
import subprocess
import types
from pathlib import Path

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.grpc_front import GrpcFront
from tests.helpers.ha_cluster import Broker, Proxy, call

REPO = Path(__file__).resolve().parents[1]
SHIM_SRC = REPO / "tests" / "faults" / "fsync_fault.c"
# what every broker of the soak shares: a cleaner that runs often but never deletes a file still
# inside fileReservedTime (forcibly), an index sized for a small filesystem, quick HA housekeeping
COMMON = ("cleanResourceInterval=1000\ncleanFileForciblyEnable=false\ndiskMaxUsedSpaceRatio=90\n"
          "fileReservedTime=48\nmaxHashSlotNum=100000\nmaxIndexNum=400000\nhaSendHeartbeatInterval=1000\n"
          "haHousekeepingInterval=5000\nsyncFlushTimeout=3000\n")
# the topics: the bulk load of each group on a topic of its own, the real clients' on both groups
TOPICS = {"SoakD": ("broker-a",), "SoakM": ("broker-b",), "SoakJ": ("broker-a", "broker-b"),
          "SoakG": ("broker-a", "broker-b")}
QUEUES = 4


class SoakCluster:
    def __init__(self, root: Path, tmpfs_mb: int = 1024):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.tmpfs: Path | None = None
        self.shim: Path | None = None
        self.fsync_ctl = root / "fsync.ctl"
        (root / "dledger").mkdir(exist_ok=True)
        self.dledger = DLedgerGroup(root / "dledger", 3, extra=COMMON, proxied=True)
        self.namesrv = self.dledger.namesrv
        self.ha_proxy: Proxy | None = None
        self.master = self.slave = None
        self.front: GrpcFront | None = None
        self._tmpfs_mb = tmpfs_mb

    # -- starting ---------------------------------------------------------------------------------
    def start(self) -> "SoakCluster":
        self.dledger.start()
        self.dledger.leader(90)
        store_root = self._mount_tmpfs()
        env = self._shim_env()
        self.master = Broker(store_root or self.root / "ms", "master", self.namesrv.addr, "SYNC_MASTER", 0,
                             f"brokerName=broker-b\nflushDiskType=ASYNC_FLUSH\n{COMMON}",
                             logs=self.root / "ms", env=env).start()
        self.ha_proxy = Proxy(self.master.ha_port)
        self.slave = Broker(self.root / "ms", "slave", self.namesrv.addr, "SLAVE", 1,
                            f"brokerName=broker-b\nhaMasterAddress=127.0.0.1:{self.ha_proxy.port}\n{COMMON}").start()
        wait_for(lambda: self.master.info()["slaves"] == 1, 60, "broker-b's slave to link")
        self.create_topics()
        self.front = GrpcFront(types.SimpleNamespace(namesrv=self.namesrv.addr), self.root)
        return self

    def _mount_tmpfs(self) -> Path | None:
        if os.geteuid() != 0:
            return None
        mnt = self.root / "tmpfs"
        mnt.mkdir(exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self._tmpfs_mb}m", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        self.tmpfs = mnt
        return mnt

    def _shim_env(self) -> dict | None:
        self.fsync_ctl.write_text("")
        out = self.root / "fsync_fault.so"
        r = subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out), str(SHIM_SRC), "-ldl"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        self.shim = out
        return {**os.environ, "LD_PRELOAD": str(out), "FSYNC_FAULT_CTL": str(self.fsync_ctl)}

    def create_topics(self) -> None:
        """UPDATE_AND_CREATE_TOPIC on every member that may serve the topic (each DLedger member
        keeps its own topic table, as RocketMQ's do), then the name server's route naming each group."""
        for topic, groups in TOPICS.items():
            targets = (list(self.dledger.brokers.values()) if "broker-a" in groups else []) + \
                      ([self.master] if "broker-b" in groups else [])
            for b in targets:
                r = call(b.port, codes.UPDATE_AND_CREATE_TOPIC, {
                    "topic": topic, "defaultTopic": "TBW102", "readQueueNums": QUEUES, "writeQueueNums": QUEUES,
                    "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
                assert r.code == codes.SUCCESS, (topic, b.name, r.code, r.remark)
            wait_for(lambda: {d["brokerName"] for d in (self.namesrv.route(topic) or {}).get("queueDatas", [])}
                     >= set(groups), 60, f"the route of {topic} naming {groups}")

    # -- what the faults and the check ask ------------------------------------------------------
    def masters(self) -> dict[str, Broker]:
        """Each group's broker serving as master now."""
        return {"broker-a": self.dledger.leader(60), "broker-b": self.master}

    def processes(self) -> dict[str, int]:
        """role -> the pid leading its process group (services included), for the sampler."""
        out = {"namesrv": self.namesrv.child.proc.pid}
        for name, b in self.dledger.brokers.items():
            if b.child is not None:
                out[f"dledger-{name}"] = b.child.proc.pid
        for role, b in (("ms-master", self.master), ("ms-slave", self.slave)):
            if b is not None and b.child is not None:
                out[role] = b.child.proc.pid
        if self.front is not None:
            out["grpc-front"] = self.front.child.proc.pid
        return out

    def stop(self) -> None:
        for name in list(self.dledger.frozen):
            self.dledger.thaw(self.dledger.brokers[name])
        if self.front is not None:
            self.front.close()
        for b in (self.slave, self.master):
            if b is not None and b.child is not None:
                try:
                    os.killpg(b.child.proc.pid, 18)  # SIGCONT: a stopped one cannot take SIGTERM
                except ProcessLookupError:
                    pass
                try:
                    b.stop()
                except Exception:
                    b.kill9()
        if self.ha_proxy is not None:
            self.ha_proxy.close()
        self.dledger.stop()
        if self.tmpfs is not None:
            subprocess.run(["umount", "-l", str(self.tmpfs)], check=False)
