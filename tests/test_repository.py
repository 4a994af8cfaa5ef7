"""The repository stands on its own: nothing in it points at a file outside it (a machine's
absolute path, a sibling checkout), so a clone anywhere reads and runs the same."""
from __future__ import annotations

import re
import subprocess

from tests.helpers.procs import REPO

# a home or work directory of some machine, or a folder beside the checkout (spelt in pieces so
# that this file does not match itself)
_ROOTS = ["work", "root", r"home/\w+", r"\.\./shared"]
OUTSIDE = re.compile(r"(?<![\w.])(" + "|".join(("/" if not r.startswith("\\") else "") + r + "/" for r in _ROOTS) + ")")


def test_no_file_points_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = REPO / name
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (plots, fuzz inputs) and files deleted in the work tree
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{name}:{n}: {line.strip()[:120]}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)
