"""`make fuzz`: every atheris harness for a fixed time on the clang build (ASan + libFuzzer
coverage), then the kernel hypothesis suites once on gcc's ASan build. A crash input is copied to
tests/fuzz_regressions/<check>/ (replayed by the normal suite from then on) and fails the run.

    .venv/bin/python tools/fuzz/run.py [--seconds 60] [--jobs N] [--only scan] [--no-asan-suite]

Both builds must exist (the Makefile's fuzz target makes them): build-fuzz/ and build-asan/.
Each harness is one libFuzzer worker (one core), so `--jobs` of them run at once (default: one per
core, FUZZ_JOBS overrides), the ASan suites beside them: every harness still gets its `--seconds` of
a core, and the run takes about 1/jobs of the wall time it took one after another.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.fuzz.checks import CHECKS  # noqa: E402

FUZZ_BUILD = REPO / "build-fuzz"
ASAN_BUILD = REPO / "build-asan"
REGRESSIONS = REPO / "tests" / "fuzz_regressions"
SEEDS = REPO / "tools" / "fuzz" / "seeds"
# The kernel suites that run again under ASan: the twin equalities and the fuzz replays.
ASAN_SUITES = ["tests/test_codec_kernel_vs_twin.py", "tests/test_ha_kernel.py", "tests/test_remoting_kernel.py",
               "tests/test_fuzz_regressions.py", "tests/test_twin_selfcheck.py", "tests/test_header_kernel_vs_twin.py",
               "tests/test_header_wbuf.py", "tests/test_send_path_kernel_vs_twin.py",
               "tests/test_cq_dispatch_kernel_vs_twin.py", "tests/test_queue_read_kernel_vs_twin.py",
               "tests/test_index_kernel_vs_twin.py", "tests/test_sql92_kernel_vs_twin.py",
               "tests/test_client_codec_kernel_vs_twin.py", "tests/test_grpc_endpoint.py",
               "tests/test_timer_wheel_kernel_vs_twin.py", "tests/test_entry_push_kernel_vs_twin.py",
               "tests/test_send_request_kernel.py", "tests/test_receive_reply_kernel_vs_twin.py",
               "tests/test_ack_request_kernel_vs_twin.py", "tests/test_batch_ack_kernel_vs_twin.py",
               "tests/test_pop_record_kernel_vs_twin.py", "tests/test_send_path_values.py"]


def _kernels_dir(build: Path) -> str:
    return str(build / "broker" / "kernels")


def fuzz_env() -> dict:
    """The three settings without which native coverage or ASan reports silently vanish
    (atheris' README, "Using Sanitizers with Python Code"): atheris' own ASan+libFuzzer runtime preloaded,
    the system malloc so ASan sees Python's buffers, and no leak checks (CPython leaks at exit)."""
    import atheris
    return dict(os.environ, LD_PRELOAD=os.path.join(atheris.path(), "asan_with_fuzzer.so"),
                PYTHONMALLOC="malloc", ASAN_OPTIONS="detect_leaks=0", BROKER_KERNELS_DIR=_kernels_dir(FUZZ_BUILD))


def asan_env() -> dict:
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                             check=True).stdout.strip()
    return dict(os.environ, LD_PRELOAD=libasan, PYTHONMALLOC="malloc",
                ASAN_OPTIONS="detect_leaks=0:abort_on_error=1", BROKER_KERNELS_DIR=_kernels_dir(ASAN_BUILD))


def run_harness(name: str, seconds: int) -> list[Path]:
    """One harness for `seconds`; returns the crash inputs it wrote (kept as regressions)."""
    corpus = FUZZ_BUILD / "corpus" / name
    crashes = FUZZ_BUILD / "crashes" / name
    corpus.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(crashes, ignore_errors=True)
    crashes.mkdir(parents=True)
    log = FUZZ_BUILD / f"fuzz_{name}.log"
    argv = [sys.executable, str(REPO / "tools" / "fuzz" / f"fuzz_{name}.py"), f"-max_total_time={seconds}",
            f"-artifact_prefix={crashes}/", "-print_final_stats=1", str(corpus), str(SEEDS / name)]
    dictionary = REPO / "tools" / "fuzz" / f"{name}.dict"
    if dictionary.exists():  # tokens random mutation rarely spells (JSON escapes, header keys)
        argv.insert(2, f"-dict={dictionary}")
    regress = REGRESSIONS / name
    if regress.exists():
        argv.append(str(regress))
    t0 = time.monotonic()
    with open(log, "wb") as out:
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=fuzz_env(), cwd=REPO).returncode
    found = sorted(p for p in crashes.iterdir() if p.is_file())
    stats = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith(("#", "stat::"))]
    done = next((ln for ln in reversed(stats) if "DONE" in ln or "pulse" in ln), "(no stats)")
    runs = next((ln.split()[-1] for ln in stats if ln.startswith("stat::number_of_executed_units")), "?")
    print(f"fuzz_{name}: {time.monotonic() - t0:.0f} s, {runs} runs, {done.strip()}, exit {rc}, "
          f"{len(found)} crash input(s); log {log.relative_to(REPO)}", flush=True)
    if rc != 0 and not found:
        print(log.read_text(errors="replace")[-3000:])
        found = [log]  # a harness that died without an artifact (e.g. a failed import) fails too
    for p in found:
        if p != log:
            regress.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, regress / p.name)
            print(f"  kept {p.name} as tests/fuzz_regressions/{name}/{p.name}")
    return found


def run_asan_suites() -> int:
    env = asan_env()
    probe = subprocess.run([sys.executable, "-c", "import broker.kernels.codec as c; print(c.__file__)"],
                           env=env, capture_output=True, text=True, cwd=REPO)
    if "build-asan" not in probe.stdout:
        print(f"the ASan build did not load: {probe.stdout}{probe.stderr}")
        return 1
    # --capture=sys: pytest's default fd capture swallows the ASan report, leaving only an exit code
    argv = [sys.executable, "-m", "pytest", "-q", "--capture=sys", "-p", "no:cacheprovider", *ASAN_SUITES]
    log = ASAN_BUILD / "asan_suites.log"
    t0 = time.monotonic()
    with open(log, "wb") as out:  # a log of its own: the harnesses print beside it
        rc = subprocess.run(argv, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT).returncode
    text = log.read_text(errors="replace")
    last = text.strip().splitlines()[-1:] or ["(no output)"]
    print(f"hypothesis suites under gcc ASan ({probe.stdout.strip()}): exit {rc} in {time.monotonic() - t0:.0f} s, "
          f"{last[0]}; log {log.relative_to(REPO)}", flush=True)
    if rc != 0:
        print(text[-20000:], flush=True)  # the failures and any ASan report
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("FUZZ_SECONDS", 60)))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("FUZZ_JOBS", os.cpu_count() or 1)))
    ap.add_argument("--only", choices=sorted(CHECKS), action="append")
    ap.add_argument("--no-asan-suite", action="store_true")
    a = ap.parse_args(argv)
    names = list(a.only or CHECKS)
    # threads only wait on the child processes; the ASan suites (the longest job) start first
    with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as pool:
        suites = None if a.no_asan_suite else pool.submit(run_asan_suites)
        found = dict(zip(names, pool.map(lambda name: run_harness(name, a.seconds), names)))
        rc = suites.result() if suites else 0
    failed = [name for name in names if found[name]]
    if failed:
        print(f"crashes found by: {', '.join(failed)} (inputs kept under tests/fuzz_regressions/)")
    return 1 if failed or rc else 0


if __name__ == "__main__":
    sys.exit(main())
