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


def test_no_symbolic_link_is_committed():
    """A worktree's links to the main checkout's installed dependencies (.deps, .venv, ...) are
    not the repository's: committed once, a merge replaced main's own .deps directory with a link
    to itself, and a fresh clone would hold a link into a machine's paths."""
    staged = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    links = [line.split("\t", 1)[1] for line in staged.splitlines() if line.startswith("120000 ")]
    assert not links, f"symbolic links committed: {links}"


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


# The README and the pages under docs/: every relative link reaches a file (and a heading, when it
# names one), and every figure the README states names the benchmark report it comes from.
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+).+?\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A throughput or latency figure: a number, then a rate (msgs/s, rows/s, records/s, KB/s to TiB/s)
# or a time (µs, us, CPU-µs/msg, ms; seconds only with a decimal point, as an outage's "0.84 s").
# "1,246 MB/s", "189,698 msgs/s", "p99 1,872 µs", "190k msgs/s", "5.9 CPU-µs/msg" are figures;
# "3.11", "2-core", "5 minutes", "port 9876", "every 10 s" are not.
FIGURE = re.compile(r"(?<![\w.])(?:\d(?:[\d,]*\d)?(?:\.\d+)?\s?k?\s?"
                    r"(?:msgs?/s|rows/s|records/s|[KMGT]i?B/s|(?:CPU-)?(?:µs|us)(?:/msg)?|ms)"
                    r"|\d+\.\d+\s?s)(?![\w/])")
REPORTS = "docs/bench/"


def _markdown_files() -> list[str]:
    def ls(*extra: str) -> list[str]:
        return subprocess.run(["git", "ls-files", *extra, "--", "*.md"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.split()
    return sorted(set(ls() + ls("--others", "--exclude-standard")))


def _prose(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with their code spans blanked (a link there is code)
    or, with blank_code=False, only their backticks dropped."""
    lines, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((n, CODE_SPAN.sub("``", line) if blank_code else line.replace("`", "")))
    return lines


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lowercased, punctuation dropped, spaces as
    hyphens, a repeated one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    for _, line in _prose(text, blank_code=False):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            seen[f"{slug}-{n}"] = 1
    return set(seen)


def _links(name: str) -> list[tuple[int, str]]:
    text = (REPO / name).read_text()
    return [(n, target) for n, line in _prose(text) for target in LINK.findall(line)]


def test_every_relative_link_in_the_markdown_reaches_a_file_and_heading():
    broken = []
    files = _markdown_files()
    assert "README.md" in files and any(f.startswith("docs/") for f in files)
    for name in files:
        for n, target in _links(name):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # https:, mailto:: not this repository's
            path, _, anchor = target.partition("#")
            dest = (REPO / name).parent / path if path else REPO / name
            if not dest.resolve().is_relative_to(REPO.resolve()):
                broken.append(f"{name}:{n}: {target} leaves the repository")
            elif not dest.exists():
                broken.append(f"{name}:{n}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                broken.append(f"{name}:{n}: {target}: no such heading in {path or name}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_the_readme_opens_with_make_run_then_make_test():
    text = (REPO / "README.md").read_text()
    first_heading = re.search(r"^## ", text, re.M)
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    assert blocks, "the README has no code block"
    assert first_heading is None or text.index(blocks[0]) < first_heading.start(), \
        "the README's first code block comes after its first section"
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines()]
    assert [c for c in commands if c] == ["make run", "make test"]


def test_every_figure_in_the_readme_names_its_report():
    text = (REPO / "README.md").read_text()
    figures, unsourced = 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if not FIGURE.search(line):
            continue
        figures += 1
        reports = [t for t in LINK.findall(line)
                   if t.startswith(REPORTS) and t.endswith(".md") and (REPO / t.partition("#")[0]).is_file()]
        if not reports:
            unsourced.append(f"README.md:{n}: {line.strip()[:120]}")
    assert not unsourced, f"figures without a link to their report under {REPORTS}:\n" + "\n".join(unsourced)
    headline = text.split("## Headline figures", 1)
    assert len(headline) == 2 and FIGURE.search(headline[1].split("\n## ", 1)[0]), \
        "the README has no headline figures"
    assert figures >= 3


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
