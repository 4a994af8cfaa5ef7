"""Apache RocketMQ's own name server and broker (rocketmq-namesrv / rocketmq-broker 5.5.0, unmodified,
the jars `make clients` copies into build/javabroker/lib from tests/javabroker/pom.xml), run as real JVM
processes on loopback beside ours. `JavaBroker` has the interface of tests.helpers.ha_cluster.Broker
(port, ha_port, store, conf, start, stop, kill9, info), so a test can hold one of each and compare.

JVM settings: runbroker.sh's G1 with a heap that fits a 2-core test machine and C1 only (a test
needs a quick start, not peak speed: the bench runs its own JVM flags), the `--add-opens` JDK 17
needs for the store's mmap cleaner and DLedger's reflection, one user.home per process
(its logs and ~/store defaults go there) and the 5.x logback chosen by system property, because
on one merged classpath the name server would otherwise pick the broker's."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.conftest import free_port
from tests.helpers.procs import Child, REPO, wait_until

LIB = REPO / "build" / "javabroker" / "lib"
VERSION = "5.5.0"
ADD_OPENS = ["--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
             "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
             "--add-opens=java.base/java.util=ALL-UNNAMED"]
# runbroker.sh's collector and flags; the heap sized for a 2-core, shared test machine and C1 only
# (start-up time is what a test pays for)
JVM_BROKER = ["-Xms512m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
              "-XX:G1ReservePercent=25", "-XX:InitiatingHeapOccupancyPercent=30",
              "-XX:SoftRefLRUPolicyMSPerMB=0", "-XX:+IgnoreUnrecognizedVMOptions"]
JVM_NAMESRV = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def available() -> bool:
    return shutil.which("java") is not None and any(LIB.glob("rocketmq-broker-*.jar"))


def _java(main: str, home: Path, logback: str, jvm: list[str], args: list[str]) -> list[str]:
    return ["java", *jvm, *ADD_OPENS, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
            f"-Drmq.logback.configurationFile={logback}", "-cp", f"{LIB}/*", main, *args]


class JavaNameServer:
    """org.apache.rocketmq.namesrv.NamesrvStartup on a free port."""

    def __init__(self, root: Path):
        self.root = root / "java-namesrv"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        conf = self.root / "namesrv.conf"
        conf.write_text(f"listenPort={self.port}\n")
        self.child = Child(_java("org.apache.rocketmq.namesrv.NamesrvStartup", self.root, "rmq.namesrv.logback.xml",
                                 JVM_NAMESRV, ["-c", str(conf)]), self.root / "stderr")
        self.child.wait_lines(lambda ls: any("boot success" in line for line in ls), 90, "the Java name server")

    def stop(self) -> None:
        self.child.kill_group()


class JavaController:
    """org.apache.rocketmq.controller.ControllerStartup, one DLedger controller on a free port (its
    RPC address, the brokers' controllerAddr). On JDK 17 it needs ADD_OPENS: hessian, which its
    ReplicasInfoManager uses, reflects into java.lang."""

    def __init__(self, root: Path, extra: str = ""):
        self.root = root / "java-controller"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        conf = self.root / "controller.conf"
        conf.write_text(f"controllerDLegerGroup=group1\ncontrollerDLegerPeers=n0-{self.addr}\n"
                        f"controllerDLegerSelfId=n0\ncontrollerStorePath={self.root / 'store'}\n{extra}")
        self.child = Child(_java("org.apache.rocketmq.controller.ControllerStartup", self.root,
                                 "rmq.controller.logback.xml", JVM_NAMESRV, ["-c", str(conf)]), self.root / "stderr")
        self.child.wait_lines(lambda ls: any("boot success" in line for line in ls), 90, "the Java controller")

    def stop(self) -> None:
        self.child.kill_group()


class JavaBroker:
    """org.apache.rocketmq.broker.BrokerStartup -c broker.conf, with the keys our Broker helper writes
    (same cluster, name, ports, store root and 1 MiB commit-log files) plus `extra`."""

    def __init__(self, root: Path, name: str, namesrv: str, role: str = "ASYNC_MASTER", broker_id: int = 0,
                 extra: str = "", segment: int = 1 << 20, port: int | None = None, ha_port: int | None = None,
                 jvm: list[str] | None = None):
        self.root, self.name = root / name, name
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.ha_port = port or free_port(), ha_port or free_port()
        self.store = self.root / "store"
        self.conf = self.root / "broker.conf"
        self.jvm = jvm or JVM_BROKER
        self.conf.write_text(
            f"brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId={broker_id}\nbrokerRole={role}\n"
            f"namesrvAddr={namesrv}\nlistenPort={self.port}\nhaListenPort={self.ha_port}\nbrokerIP1=127.0.0.1\n"
            f"storePathRootDir={self.store}\nmappedFileSizeCommitLog={segment}\n{extra}")
        self.child: Child | None = None
        self.runs = 0

    def start(self, timeout: float = 120) -> "JavaBroker":
        self.runs += 1
        self.child = Child(_java("org.apache.rocketmq.broker.BrokerStartup", self.root, "rmq.broker.logback.xml",
                                 self.jvm, ["-c", str(self.conf)]), self.root / f"stderr.{self.runs}")
        self.child.wait_lines(lambda ls: any("boot success" in line for line in ls), timeout,
                              f"the Java broker {self.name} to boot")
        return self

    @property
    def pid(self) -> int:
        return self.child.proc.pid

    def stop(self) -> None:
        """SIGTERM, as mqshutdown does: the JVM's shutdown hook flushes and deletes the `abort` file."""
        if self.child is not None and self.child.proc.poll() is None:
            self.child.proc.send_signal(signal.SIGTERM)
            try:
                self.child.proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        if self.child is not None:
            self.child.kill_group()

    def kill9(self) -> None:
        self.child.kill_group()

    def log(self, name: str = "broker.log") -> str:
        p = self.root / "logs" / "rocketmqlogs" / name
        return p.read_text(errors="replace") if p.exists() else ""

    def info(self) -> dict:
        """GET_BROKER_RUNTIME_INFO's table. The Java broker answers SYSTEM_ERROR
        (NoSuchElementException from its store statistics) until their first one-second sample
        exists, so this waits for that sample rather than for a fixed time."""
        import msgspec

        from broker.remoting import codes
        from tests.helpers.ha_cluster import call
        got: list = []

        def answered() -> bool:
            r = call(self.port, codes.GET_BROKER_RUNTIME_INFO)
            if r.code == codes.SUCCESS:
                got.append(r)
            return bool(got)
        wait_until(answered, 30, f"the Java broker {self.name}'s runtime info")
        table = msgspec.json.decode(bytes(got[0].body))["table"]
        return {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in table.items()}


def wait_port_free(port: int, timeout: float = 30) -> None:
    """Until nothing listens on `port` (a JVM that got SIGKILL may hold it a moment longer)."""
    import socket

    def free() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) != 0
    wait_until(free, timeout, f"port {port} to be free")


def jvm_cpu_seconds(pid: int) -> float:
    """utime+stime of a process (the JVM's every thread), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
