"""Apache RocketMQ's mqadmin (org.apache.rocketmq.tools.command.MQAdminStartup, the jars `make clients`
copies into build/mqadmin/lib from tests/mqadmin/pom.xml), run as the operator runs it: one JVM per
command, `-n <name server>`, its output returned for the tests to read. The JVM starts at
tests/mqadmin/src/mqadmin/Once.java: MQAdminStartup.main itself, then System.exit as soon as it returns,
instead of waiting out Netty's graceful shutdown (half of each command's ~7 s here)."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.procs import REPO

LIB = REPO / "build" / "mqadmin" / "lib"
CLASSES = REPO / "build" / "mqadmin" / "classes"
MAIN = "mqadmin.Once"  # org.apache.rocketmq.tools.command.MQAdminStartup.main, then the exit
# JDK 17 closes these packages; RocketMQ's tools.sh opens them the same way
ADD_OPENS = ["--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
             "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens=java.base/java.util=ALL-UNNAMED"]


def available() -> bool:
    return (shutil.which("java") is not None and any(LIB.glob("rocketmq-tools-*.jar"))
            and (CLASSES / "mqadmin" / "Once.class").exists())


@dataclass
class Result:
    argv: list[str]
    out: str
    err: str
    code: int

    def __str__(self) -> str:  # what a failed assertion shows
        return f"$ mqadmin {' '.join(self.argv)}\n--- stdout\n{self.out}--- stderr\n{self.err}--- exit {self.code}"


def mqadmin(namesrv: str, *args: str, home: Path, timeout: float = 60) -> Result:
    """`mqadmin <args> -n <namesrv>`. mqadmin prints its failures and still exits 0, so the tests read
    stdout. `home` is its user.home: its log (~/logs/rocketmqlogs/tools.log) goes there."""
    home.mkdir(parents=True, exist_ok=True)
    argv = [*args, "-n", namesrv]
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *ADD_OPENS,
           f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
           "-Drmq.logback.configurationFile=rmq.tools.logback.xml",
           "-cp", f"{CLASSES}:{LIB}/*", MAIN, *argv]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(home))
    return Result(argv, p.stdout, p.stderr, p.returncode)
