"""The broker runs on the compiled kernels only: no silent fallback to the Python twins."""
import os
import shutil
import subprocess
import sys

import broker.kernels.atomics
import broker.kernels.codec
import broker.kernels.ha
import broker.kernels.remoting


def test_kernels_are_extension_modules():
    for mod in (broker.kernels.codec, broker.kernels.atomics, broker.kernels.remoting, broker.kernels.ha):
        assert mod.__file__.endswith(".so"), mod.__file__


def test_missing_kernels_fail_loudly(tmp_path):
    # A copy of the package without the compiled .so files must refuse to import, naming the fix.
    src = os.path.dirname(os.path.dirname(broker.kernels.codec.__file__))
    shutil.copytree(src, tmp_path / "broker", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    r = subprocess.run([sys.executable, "-c", "import broker.store.commit_log"], cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert r.returncode != 0
    assert "make install" in r.stderr
