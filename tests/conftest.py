"""Shared fixtures. Tests run real processes on real files; asyncio tests use asyncio.run."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from broker.store.config import MessageStoreConfig
from tools.servers import free_port  # noqa: F401 - the tests import it from here

# The suite must exercise the compiled kernels, never a fallback (aiokafka's guard).
import broker.kernels.codec as _codec
import broker.kernels.atomics as _atomics

assert _codec.__file__.endswith(".so") and _atomics.__file__.endswith(".so"), "kernels are not compiled"


def small_config(root, **overrides) -> MessageStoreConfig:
    """A store with 1 MiB commit-log segments and 2,000-entry consume-queue files."""
    kw = dict(storePathRootDir=str(root), mappedFileSizeCommitLog=1 << 20, mappedFileSizeConsumeQueue=20 * 2000)
    kw.update(overrides)
    return MessageStoreConfig(**kw)


@pytest.fixture
def store_config(tmp_path):
    return lambda **kw: small_config(tmp_path / "store", **kw)


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    """Wait for a condition that no wake-up exists for (another process's state); bounded."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def small_fs(tmp_path):
    """A 48 MiB tmpfs mounted for the test: a real filesystem that fills up."""
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        # As root (CI, `make test` with apt-get) the mount must work: its failure is a failure.
        # Only an unprivileged developer run skips, and says why.
        assert os.geteuid() != 0, f"mounting a size-limited tmpfs failed as root: {r.stderr.strip()}"
        pytest.skip(f"not root: cannot mount a size-limited tmpfs (needs CAP_SYS_ADMIN): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# --- fixture directories leave with their module -------------------------------------------
# pyproject's tmp_path_retention_policy removes a passed test's tmp_path at its teardown, but a
# directory a module- or session-scoped fixture makes with tmp_path_factory.mktemp stays until
# the session ends. Those hold whole clusters (1 GiB commit-log segments fallocated, DLedger's
# index files written ahead): about 10 GB by the end of a suite, which pushed CI's disk past
# diskSpaceCleanForciblyRatio (85 %) and let the cleaner delete a later test's segments. So each
# module's fixture directories are removed once its fixtures are torn down, unless one of its
# tests failed (the logs are the evidence).
_fixture_dirs: dict[str, list] = {}
_failed_modules: set[str] = set()
_current_module: list[str] = [""]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    factory = session.config._tmp_path_factory
    mktemp = factory.mktemp

    def recording_mktemp(basename, numbered=True):
        path = mktemp(basename, numbered)
        _fixture_dirs.setdefault(_current_module[0], []).append(path)
        return path

    factory.mktemp = recording_mktemp


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _current_module[0] = item.nodeid.split("::", 1)[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _failed_modules.add(item.nodeid.split("::", 1)[0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the module's fixtures (its brokers) are torn down inside
    module = item.nodeid.split("::", 1)[0]
    if nextitem is not None and nextitem.nodeid.split("::", 1)[0] == module:
        return
    for path in _fixture_dirs.pop(module, []):
        if module not in _failed_modules:
            shutil.rmtree(path, ignore_errors=True)
