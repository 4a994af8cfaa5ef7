"""The LD_PRELOAD fault shim of the failing-disk tests (tests/faults/fsync_fault.c): built with gcc
into a directory of the test's, and the environment that puts one process under it."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

SHIM_SRC = Path(__file__).parent.parent / "faults" / "fsync_fault.c"


def build_shim(directory: Path) -> Path:
    out = directory / "fsync_fault.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out), str(SHIM_SRC), "-ldl", "-lpthread"], check=True)
    return out


def shim_env(shim: Path, ctl: Path, match: str | None = None) -> dict:
    """A process environment under the shim, its faults chosen by the control file `ctl` (created
    empty: no fault) on files whose path contains `match` (the shim's default: /commitlog/)."""
    ctl.write_text("")
    env = {**os.environ, "LD_PRELOAD": str(shim), "FSYNC_FAULT_CTL": str(ctl)}
    if match:
        env["FSYNC_FAULT_MATCH"] = match
    return env


def faults_logged(ctl: Path) -> list[str]:
    """The faults the shim injected so far, one line each ("fdatasync fd 12 pid 345")."""
    log = Path(f"{ctl}.log")
    return log.read_text().splitlines() if log.exists() else []
