"""The Spark example of docs/spark.md (issue 15.5), as `make spark-example` runs it: examples/spark_example.sh
against a real name server and broker (tests.helpers.real_clients.Cluster on free ports instead of
`make run`'s 127.0.0.1:9876), the Spark part a local[2] session in the script's own process."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster

EXAMPLE = REPO / "examples" / "spark_example.sh"
SCRIPT = REPO / "examples" / "count_by_tag.py"
VENV = Path(sys.executable).parent.parent  # the interpreter running the tests is the one to use


def run_example(namesrv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, NAMESRV=namesrv, VENV=str(VENV))
    env.pop("NAMESRV_ADDR", None)  # the example must take the address from NAMESRV alone
    return subprocess.run(["sh", str(EXAMPLE)], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(REPO))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("spark-example")) as c:
        yield c


def counts_read_back(out: str) -> tuple[str, dict[str, int]]:
    """The counts topic and its two messages, from the consume lines the example prints."""
    msgs = [json.loads(line) for line in out.splitlines() if line.startswith('{"topic"')]
    assert len(msgs) == 2, out
    assert len({m["topic"] for m in msgs}) == 1, msgs
    counts = {}
    for m in msgs:
        body = json.loads(m["body"])
        assert m["tags"] == body["tags"], m  # the sink wrote the tags column as the message's tag
        counts[body["tags"]] = body["count"]
    return msgs[0]["topic"], counts


def test_the_example_counts_the_orders_and_can_run_again(cluster):
    topics = []
    for _ in range(2):  # a second run counts only its own orders
        r = run_example(cluster.namesrv)
        assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
        # counts.show() of the script, then the two messages consumed back from the counts topic
        assert re.search(r"\|\s*TagA\|\s*3000\|\s*\n\|\s*TagB\|\s*1000\|", r.stdout), r.stdout
        topic, counts = counts_read_back(r.stdout)
        assert counts == {"TagA": 3000, "TagB": 1000}
        topics.append(topic)
    assert topics[0] != topics[1]
    assert cluster.total(topics[0], queues=16) == 2  # the counts topic holds exactly the two counts


def test_without_a_broker_the_example_says_to_start_make_run(tmp_path):
    r = run_example(f"127.0.0.1:{free_port()}", timeout=60)  # nothing listens there
    assert r.returncode != 0
    assert "no broker reachable through the name server" in r.stderr and "make run" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "produced" not in r.stdout


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, re.S)


@pytest.mark.parametrize("doc", ["docs/spark.md"])
def test_the_documented_example_is_the_script_that_runs(doc):
    assert SCRIPT.read_text() in _python_blocks((REPO / doc).read_text()), \
        f"{doc}'s count-by-tag block differs from {SCRIPT.relative_to(REPO)}: copy the file into it"
