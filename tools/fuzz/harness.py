"""The atheris entry point shared by the per-kernel harnesses: `python tools/fuzz/fuzz_<name>.py
[libFuzzer flags] CORPUS_DIR [SEED_DIR]`. Run through `make fuzz` (tools/fuzz/run.py), which builds
the instrumented kernels and sets the three things native coverage needs: BROKER_KERNELS_DIR of the
clang build, atheris' asan_with_fuzzer.so preloaded, and PYTHONMALLOC=malloc."""
from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(name: str) -> None:
    sys.path.insert(0, REPO)
    import atheris

    from tools.fuzz.checks import CHECKS

    check = CHECKS[name]
    import broker.kernels.codec
    if "build-fuzz" not in broker.kernels.codec.__file__:
        sys.exit(f"fuzz_{name}: the kernels loaded from {broker.kernels.codec.__file__}, not the "
                 "instrumented build; run through `make fuzz`")
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()
