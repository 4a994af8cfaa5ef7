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


def _modules(*packages: str) -> dict[str, object]:
    """module name -> path of every .py file under `packages` (a package is named without __init__)."""
    out = {}
    for package in packages:
        for path in sorted((REPO / package).rglob("*.py")):
            out[".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")] = path
    return out


def _imports(path, modules: dict) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, at any depth: one inside a function (imported
    when it runs) or under TYPE_CHECKING still makes the two modules know each other. `from p
    import m` is an import of the module p.m when m is one, else of p."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module)
                    for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def test_no_import_circles():
    """No two modules of the package, the bench or the tools import each other, directly or round a
    longer circle: what they share lives in a third module both import."""
    modules = _modules("broker", "bench", "tools")
    graph = {name: {target for _, target in _imports(path, modules) if target in modules and target != name}
             for name, path in modules.items()}
    # Tarjan's strongly connected components: any with more than one module is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


def test_the_bench_imports_nothing_of_the_tests():
    """`make bench` runs from any checkout: what the bench and the tests both need lives in tools/
    (tools/servers.py) or bench/, never in tests/."""
    hits = sorted({f"{path.relative_to(REPO)}:{line}: imports {target}"
            for path in _modules("bench").values() for line, target in _imports(path, {})
            if target == "tests" or target.startswith("tests.")})
    assert not hits, "\n".join(hits)
