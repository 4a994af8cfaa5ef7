"""The compiled Cython kernels (sources in pyx/). There is deliberately no pure-Python fallback:
the broker must never run on the slow twins (those live in tests/twins/ for checking only)."""
import os

# An instrumented build of the same sources (ASan for the hypothesis suites, clang+libFuzzer for
# `make fuzz`), chosen explicitly by the harness: searched before the in-place build.
if os.environ.get("BROKER_KERNELS_DIR"):
    __path__.insert(0, os.path.abspath(os.environ["BROKER_KERNELS_DIR"]))

try:
    from broker.kernels import atomics, codec  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised by tests/test_kernels_native.py in a subprocess
    raise ImportError(f"the broker's Cython kernels are not built ({e}); run `make install`") from e
