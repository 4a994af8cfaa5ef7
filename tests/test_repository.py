"""The repository stands on its own: nothing in it points at a file outside it (a machine's
absolute path, a sibling checkout), so a clone anywhere reads and runs the same."""
from __future__ import annotations

import ast
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


# The layers of the package, lowest first: a module may import its own layer's package and those
# below it, never one above (DESIGN.md, "Packages"). The transport (remoting) never imports the
# broker (server), and the client library never imports the broker nor its gRPC front.
LAYERS = [
    {"kernels"},
    {"store"},
    {"conf", "services", "remoting"},
    {"ha", "raft", "common"},
    {"controller"},
    {"namesrv", "client", "server"},
    {"reliable", "spark"},
    {"proxy"},
    {"cli"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "broker" and len(parts) > 1 else None


def test_imports_flow_one_way():
    upward = []
    for path in sorted((REPO / "broker").rglob("*.py")):
        src = _package_of(".".join(path.relative_to(REPO).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                dst = _package_of(target)
                if src and dst and dst != src and RANK[dst] >= RANK[src]:
                    upward.append(f"{path.relative_to(REPO)}:{node.lineno}: broker.{src} imports {target}")
    assert not upward, "imports against the layers:\n" + "\n".join(upward)
