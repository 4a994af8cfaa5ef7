"""Apache RocketMQ's own Java programs (rocketmq-namesrv / -broker / -proxy 5.5.0, unmodified, the
jars `make build/javabroker/.copied` puts in build/javabroker/lib) as the bench's peer: started as
real JVM processes on loopback, each in its own directory, killed (SIGKILL of its process group)
when its cell ends and its directory deleted.

JVM settings are the ones its users run, sized for this machine: runbroker.sh's G1 flags with a
2 GiB heap and 2 GiB of direct memory instead of 8g/15g, and without -XX:+AlwaysPreTouch (it would
touch the whole heap at start, for nothing on a 2-core VM); runserver.sh's for the name server and
the proxy, with smaller heaps. The `--add-opens` JDK 17 needs for the store's, DLedger's and the
controller's reflection (DLedger 0.3.x and the 5.x store reflect into JDK internals), one user.home per process
(its logs and ~/store defaults go there), the 5.x logback chosen by system property (on one merged
classpath the name server would otherwise pick the broker's).

tests/helpers/java_broker.py starts the same programs for the tests; the bench does not import
tests/, hence this module.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from bench.processes import free_port

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(REPO, "build", "javabroker", "lib")
ADD_OPENS = ["--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
             "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
             "--add-opens=java.base/java.util=ALL-UNNAMED"]
G1 = ["-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25", "-XX:InitiatingHeapOccupancyPercent=30",
      "-XX:SoftRefLRUPolicyMSPerMB=0"]
# runbroker.sh (5.x, JDK >= 9) but for the heap: -Xms8g -Xmx8g -XX:MaxDirectMemorySize=15g -XX:+AlwaysPreTouch there
JVM_BROKER = ["-server", "-Xms2g", "-Xmx2g", "-XX:MaxDirectMemorySize=2g", *G1, "-XX:-OmitStackTraceInFastThrow",
              "-XX:-UseLargePages", "-XX:-UseBiasedLocking", "-XX:+IgnoreUnrecognizedVMOptions"]
# runserver.sh (mqnamesrv, mqproxy) with -Xms4g -Xmx4g there
JVM_NAMESRV = ["-server", "-Xms256m", "-Xmx256m", "-XX:MaxMetaspaceSize=320m", *G1]
JVM_PROXY = ["-server", "-Xms1g", "-Xmx1g", "-XX:MaxMetaspaceSize=320m", *G1]
CLUSTER = "DefaultCluster"


class JavaUnavailable(RuntimeError):
    """No `java` on PATH or no jars in build/javabroker/lib."""


def check_available() -> str:
    """The `java -version` line; raises JavaUnavailable with what to do."""
    if shutil.which("java") is None:
        raise JavaUnavailable("no `java` on PATH (JDK 17: apt-get install openjdk-17-jre-headless)")
    if not os.path.isdir(LIB) or not any(n.startswith("rocketmq-broker-") for n in os.listdir(LIB)):
        raise JavaUnavailable(f"no rocketmq-broker jar in {LIB}: run `make build/javabroker/.copied`")
    r = subprocess.run(["java", "-version"], capture_output=True, text=True)
    return (r.stderr or r.stdout).splitlines()[0]


def version() -> str:
    """"5.5.0", from the broker jar's name."""
    jar = next(n for n in sorted(os.listdir(LIB)) if n.startswith("rocketmq-broker-"))
    return jar[len("rocketmq-broker-"):-len(".jar")]


class JavaProcess:
    """One JVM in its own directory and process group; its stdout lines collected by a thread."""

    main = ""
    logback = ""
    ready = "boot success"
    jvm: list[str] = []
    what = "a Java program"

    def __init__(self, root: str):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self._cv = threading.Condition()
        self._eof = False

    def args(self) -> list[str]:
        return []

    def argv(self) -> list[str]:
        return ["java", *self.jvm, *ADD_OPENS, f"-Duser.home={self.root}", f"-Drocketmq.home.dir={self.root}",
                f"-Drmq.logback.configurationFile={self.logback}", "-cp", f"{LIB}/*", self.main, *self.args()]

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._eof = True
            self._cv.notify_all()

    def start(self, timeout: float = 120.0) -> "JavaProcess":
        with open(os.path.join(self.root, "stderr"), "ab") as err:
            self.proc = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.root, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout
        with self._cv:
            while not any(self.ready in line for line in self.lines):
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    self.stop()
                    with open(os.path.join(self.root, "stderr"), errors="replace") as f:
                        tail = f.read()[-2000:]
                    raise RuntimeError(f"{self.what} did not start ({'exit ' + str(self.proc.poll()) if self._eof else 'timeout'}); "
                                       f"stdout: {' | '.join(self.lines[-5:])}; stderr: {tail}")
                self._cv.wait(left)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGKILL of its process group: a bench's JVM keeps nothing (its directory is deleted right
        after), and a SIGTERM'd broker's shutdown hook takes seconds to flush what nobody reads."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class JavaNameServer(JavaProcess):
    main = "org.apache.rocketmq.namesrv.NamesrvStartup"
    logback = "rmq.namesrv.logback.xml"
    jvm = JVM_NAMESRV
    what = "the Java name server"

    def __init__(self, workdir: str):
        super().__init__(tempfile.mkdtemp(prefix="java-namesrv-", dir=workdir))
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.conf = os.path.join(self.root, "namesrv.conf")
        with open(self.conf, "w") as f:
            f.write(f"listenPort={self.port}\n")

    def args(self) -> list[str]:
        return ["-c", self.conf]

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.root, ignore_errors=True)


class JavaBroker(JavaProcess):
    """BrokerStartup -c broker.conf: `keys` are the mode's lines (flushDiskType, brokerRole, ...),
    written after the ones every cell shares (cluster, name, loopback ports, store root, segment
    size)."""

    main = "org.apache.rocketmq.broker.BrokerStartup"
    logback = "rmq.broker.logback.xml"
    jvm = JVM_BROKER
    what = "the Java broker"

    def __init__(self, workdir: str, label: str, namesrv: str, keys: str, segment: int = 256 << 20,
                 broker_name: str = "broker-java"):
        super().__init__(tempfile.mkdtemp(prefix=f"java-{label}-", dir=workdir))
        self.label = label
        self.port = free_port()
        self.ha_port = free_port()
        self.keys = keys
        self.conf = os.path.join(self.root, "broker.conf")
        with open(self.conf, "w") as f:
            f.write(f"brokerClusterName={CLUSTER}\nbrokerName={broker_name}\nnamesrvAddr={namesrv}\n"
                    f"brokerIP1=127.0.0.1\nlistenPort={self.port}\nhaListenPort={self.ha_port}\n"
                    f"storePathRootDir={self.root}/store\nmappedFileSizeCommitLog={segment}\n{keys}")

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def args(self) -> list[str]:
        return ["-c", self.conf]

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.root, ignore_errors=True)


class JavaProxy(JavaProcess):
    """ProxyStartup in cluster mode (a separate process in front of the brokers, as ours is): gRPC
    on a free loopback port, the brokers found through `namesrv`."""

    main = "org.apache.rocketmq.proxy.ProxyStartup"
    logback = "rmq.proxy.logback.xml"
    jvm = JVM_PROXY
    ready = "startup successfully"
    what = "the Java proxy"

    def __init__(self, workdir: str, namesrv: str):
        super().__init__(tempfile.mkdtemp(prefix="java-proxy-", dir=workdir))
        self.port = free_port()
        self.endpoints = f"127.0.0.1:{self.port}"
        self.conf = os.path.join(self.root, "rmq-proxy.json")
        with open(self.conf, "w") as f:
            json.dump({"rocketMQClusterName": CLUSTER, "namesrvAddr": namesrv, "proxyMode": "cluster",
                       "grpcServerPort": self.port, "remotingListenPort": free_port()}, f)

    def args(self) -> list[str]:
        return ["-pc", self.conf, "-pm", "cluster"]

    def cpu_seconds(self) -> float:
        from bench.proc_cpu import cpu_seconds
        return cpu_seconds(self.pid) or 0.0

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.root, ignore_errors=True)
