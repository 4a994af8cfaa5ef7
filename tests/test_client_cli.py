"""`broker produce|consume|admin` as a user runs them: subprocesses against `broker run` (a name
server and a broker, child processes), output checked line by line; an unreachable name server
or broker is one line on stderr naming it, exit status 2."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys

import pytest

from tests.conftest import free_port
from tests.helpers.procs import REPO, wait_until


def cli(*args, stdin: str | None = None, timeout: float = 30, namesrv: str | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "broker.cli", *args]
    if namesrv is not None:
        argv += ["--namesrv", namesrv]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))


cluster_log: dict = {}  # name server address -> the `broker run` output file


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`broker run` on free ports; yields the name server address; SIGTERM and a clean exit at the end."""
    root = tmp_path_factory.mktemp("cli")
    ns_port, broker_port = free_port(), free_port()
    namesrv = f"127.0.0.1:{ns_port}"
    with open(root / "run.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "run", "--store-root", str(root / "store"),
                                 "--namesrv-listen", namesrv, "--listen-port", str(broker_port), "--grpc-port", "0"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO))
        try:
            # the broker's registration shows as TBW102 in the name server's topic list
            wait_until(lambda: proc.poll() is None and "TBW102" in cli("admin", "topic", "list", namesrv=namesrv).stdout
                       or proc.poll() is not None, 20, "the broker registered with the name server")
            assert proc.poll() is None, (root / "run.log").read_text()
            cluster_log[namesrv] = root / "run.log"
            yield namesrv
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0, (root / "run.log").read_text()


def test_produce_consume_and_offsets_round_trip(cluster):
    r = cli("admin", "topic", "create", "--topic", "CliT", "--queues", "2", namesrv=cluster)
    assert r.returncode == 0 and r.stdout.startswith("created CliT with 2 queues on 127.0.0.1:"), r.stderr
    wait_until(lambda: "CliT" in cli("admin", "topic", "list", namesrv=cluster).stdout.split(), 15, "the route of CliT")

    r = cli("produce", "--topic", "CliT", "--tags", "TagA", "--keys", "K1", "--prop", "color=red", "--count", "4",
            "--body", "hello", namesrv=cluster)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 4 and all(line.startswith("SEND_OK msgId=") for line in lines), r.stderr
    assert {line.split("queue=")[1].split()[0] for line in lines} == {"CliT@broker-a:0", "CliT@broker-a:1"}
    assert r.stderr == "sent 4 messages to CliT\n"
    r = cli("produce", "--topic", "CliT", "--tags", "TagB", namesrv=cluster, stdin="line one\nline two\n")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stderr
    assert r.stderr == "sent 2 messages to CliT\n"  # a pipe, not a terminal: no prompt

    r = cli("consume", "--topic", "CliT", "--group", "cliG", "--from-first", "--count", "6", "--timeout", "20",
            namesrv=cluster)
    assert r.returncode == 0, r.stderr
    msgs = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(m["body"] for m in msgs) == ["hello"] * 4 + ["line one", "line two"]
    hello = next(m for m in msgs if m["body"] == "hello")
    assert (hello["topic"], hello["tags"], hello["keys"], hello["properties"]["color"]) == ("CliT", "TagA", "K1", "red")
    assert len(hello["msgId"]) == 32 and hello["queueId"] in (0, 1)

    # the group's offsets were committed on exit: nothing left to consume
    r = cli("admin", "offsets", "--group", "cliG", "--topic", "CliT", namesrv=cluster)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "total lag 0", r.stdout + r.stderr
    rows = [line.split() for line in r.stdout.splitlines()[1:-1]]
    assert sorted((q, int(c), int(mx)) for _, q, c, mx, _ in rows) == [("0", 3, 3), ("1", 3, 3)]

    # another group, a tag filter: only the TagB messages
    r = cli("consume", "--topic", "CliT", "--group", "cliG2", "--tags", "TagB", "--from-first", "--count", "2",
            "--timeout", "20", namesrv=cluster)
    assert r.returncode == 0 and sorted(json.loads(x)["body"] for x in r.stdout.splitlines()) == ["line one", "line two"]


def test_consume_times_out_with_status_1_when_fewer_arrive(cluster):
    r = cli("consume", "--topic", "CliEmpty", "--group", "cliG3", "--count", "1", "--timeout", "1", namesrv=cluster)
    assert r.returncode == 1 and r.stdout == "" and "0 of 1 messages" in r.stderr


def test_admin_route_status_and_cluster(cluster):
    r = cli("admin", "topic", "route", "--topic", "TBW102", namesrv=cluster)
    route = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [b["brokerName"] for b in route["brokerDatas"]] == ["broker-a"]
    assert list(route["brokerDatas"][0]["brokerAddrs"]) == ["0"]
    assert route["queueDatas"][0]["brokerName"] == "broker-a" and route["queueDatas"][0]["writeQueueNums"] > 0
    r = cli("admin", "status", namesrv=cluster)
    assert r.returncode == 0, r.stderr
    table = dict(line.split(None, 1) for line in r.stdout.splitlines()[1:])  # putTps is "10s 1min 10min"
    assert table["brokerVersionDesc"] == "V4_9_4" and table["service_up_clean"] == "1"
    assert float(table["disk_usage_ratio"]) > 0 and table["disk_full"] == "0"
    r = cli("admin", "cluster", namesrv=cluster)
    assert json.loads(r.stdout)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


@pytest.mark.parametrize("args", [("produce", "--topic", "T", "--body", "x"),
                                  ("consume", "--topic", "T", "--group", "g", "--timeout", "1"),
                                  ("admin", "topic", "list")])
def test_unreachable_name_server_is_one_line_and_status_2(args):
    addr = f"127.0.0.1:{free_port()}"
    r = cli(*args, namesrv=addr)
    assert r.returncode == 2
    assert len(r.stderr.splitlines()) == 1 and addr in r.stderr and "Traceback" not in r.stderr


def test_unreachable_broker_is_one_line_and_status_2(cluster):
    addr = f"127.0.0.1:{free_port()}"
    r = cli("admin", "status", "--broker", addr, namesrv=cluster)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and addr in r.stderr


def test_namesrv_defaults_to_the_environment(cluster):
    env = dict(os.environ, NAMESRV_ADDR=cluster)
    r = subprocess.run([sys.executable, "-m", "broker.cli", "admin", "topic", "list"], capture_output=True, text=True,
                       timeout=30, cwd=str(REPO), env=env)
    assert r.returncode == 0 and "TBW102" in r.stdout.split()


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} broker\[\d+\] INFO status: (.*)$")


def test_run_is_quiet_unless_asked(cluster):
    """What `make run` shows an operator while it serves: log lines, never a Python repr of a
    dict; no periodic status unless asked for (the module's produce/consume ran meanwhile)."""
    out = cluster_log[cluster].read_text()
    assert "{'" not in out and "offsets" not in out and "status:" not in out, out[-2000:]


def test_status_interval_logs_one_line_with_units(tmp_path):
    """--status-interval: a line in the log's format with sizes in units and rates."""
    ns = f"127.0.0.1:{free_port()}"
    with open(tmp_path / "run.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "run", "--store-root", str(tmp_path / "store"),
                                 "--namesrv-listen", ns, "--listen-port", str(free_port()), "--grpc-port", "0", "--status-interval", "0.2"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO))
    try:
        wait_until(lambda: "TBW102" in cli("admin", "topic", "list", namesrv=ns).stdout, 20, "the broker to register")
        assert cli("produce", "--topic", "StatusT", "--count", "3", "--body", "x" * 1000, namesrv=ns).returncode == 0

        def put_line():
            found = [m.group(1) for m in map(LOG_LINE.match, (tmp_path / "run.log").read_text().splitlines()) if m]
            return next((f for f in found if "put 3 msgs" in f), None)
        line = wait_until(put_line, 20, "a status line counting the 3 puts")
        assert re.search(r"commit log \d+\.\d (KiB|MiB) up to \d+", line), line
        assert re.search(r"put 3 msgs \(\d+\.\d KiB\) \d+ msgs/s", line) and "disk " in line and "% used" in line, line
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_produce_refuses_count_without_body():
    """--count repeats --body; without --body the lines of stdin are the messages. The refusal is
    argparse's: the usage, the error, status 2, and nothing read or sent."""
    r = cli("produce", "--topic", "T", "--count", "1000", namesrv=f"127.0.0.1:{free_port()}", stdin="x\n")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.startswith("usage: broker produce")
    assert r.stderr.splitlines()[-1] == ("broker produce: error: --count needs --body "
                                         "(without --body each line of stdin is one message)")
    r = cli("produce", "--topic", "T", "--body", "x", "--count", "0", namesrv=f"127.0.0.1:{free_port()}")
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == "broker produce: error: --count 0: at least 1"


def test_produce_from_an_empty_stdin_says_it_sent_nothing():
    """Status 1 (as a consume that got fewer than --count): a pipe whose writer failed must not look
    like a success. stdin is read before any connection: the unreachable name server is not asked."""
    r = cli("produce", "--topic", "T", namesrv=f"127.0.0.1:{free_port()}", stdin="")
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "broker produce: read no lines from stdin; sent nothing\n")


def test_produce_at_a_terminal_says_it_reads_lines(cluster):
    """stdin a terminal (a pty): the prompt on stderr before anything is typed, then one message a
    line until Ctrl-D, and the count."""
    master, slave = pty.openpty()
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "produce", "--topic", "CliTty",
                                 "--namesrv", cluster], stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        os.close(slave)
        slave = -1
        # before anything is typed the command tells what it waits for (bounded: without the prompt
        # the child would wait on the terminal and readline here with it)
        assert select.select([proc.stderr], [], [], 30)[0], "no prompt within 30 s"
        assert proc.stderr.readline() == "reading message bodies from stdin, one per line; Ctrl-D to end\n"
        os.write(master, b"typed one\ntyped two\n\x04")  # \x04: Ctrl-D at the start of a line, end of input
        out, err = proc.communicate(timeout=30)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert proc.returncode == 0, err
    assert len(out.splitlines()) == 2 and all(line.startswith("SEND_OK msgId=") for line in out.splitlines())
    assert err == "sent 2 messages to CliTty\n"


def test_admin_takes_mqadmin_letters(cluster):
    """An mqadmin command line after `broker admin <command>`: updateTopic's -n -t -r -w -p -o -b -c,
    topicRoute's -t, consumerProgress's -g -t, brokerStatus's and clusterList's -c, queryMsgByKey's
    -t -k -m, updateSubGroup's -n, getBrokerEpoch's -b, and the issue's own `topic create -n ... -t ... -q 4`."""
    info = json.loads(cli("admin", "cluster", namesrv=cluster).stdout)
    broker_addr = info["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"]
    r = cli("admin", "topic", "create", "-n", cluster, "-t", "CliLetters", "-r", "2", "-w", "3", "-p", "6", "-o",
            "false", "-b", broker_addr)
    assert (r.returncode, r.stdout) == (0, f"created CliLetters with 2 read and 3 write queues on {broker_addr}\n"), \
        r.stderr

    def queues(topic):
        r = cli("admin", "topic", "route", "-n", cluster, "-t", topic)
        if r.returncode != 0:
            return None
        q = json.loads(r.stdout)["queueDatas"][0]
        return q["readQueueNums"], q["writeQueueNums"], q["perm"]
    wait_until(lambda: queues("CliLetters") == (2, 3, 6), 20, "the route of CliLetters with 2 read, 3 write queues")

    r = cli("admin", "topic", "create", "-n", cluster, "-t", "CliQ", "-q", "4", "-c", "DefaultCluster")
    assert (r.returncode, r.stdout) == (0, f"created CliQ with 4 queues on {broker_addr}\n"), r.stderr
    wait_until(lambda: queues("CliQ") == (4, 4, 6), 20, "the route of CliQ with 4 queues")
    r = cli("admin", "topic", "create", "-n", cluster, "-t", "CliR", "-r", "8", "-p", "4", "-c", "NoSuchCluster")
    assert r.returncode == 2 and "no master broker in cluster NoSuchCluster" in r.stderr

    assert "CliQ" in cli("admin", "topic", "list", "-n", cluster).stdout.split()
    r = cli("produce", "-n", cluster, "--topic", "CliQ", "--keys", "LetterKey", "--body", "by letters")
    assert r.returncode == 0, r.stderr
    r = cli("admin", "query", "-n", cluster, "-t", "CliQ", "-k", "LetterKey", "-m", "4")
    assert r.returncode == 0 and [json.loads(x)["body"] for x in r.stdout.splitlines()] == ["by letters"], r.stderr
    r = cli("admin", "offsets", "-n", cluster, "-g", "cliLettersG", "-t", "CliQ")
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "total lag 1", r.stdout + r.stderr
    r = cli("admin", "status", "-n", cluster, "-c", "DefaultCluster")
    assert r.returncode == 0 and r.stdout.splitlines()[0] == broker_addr, r.stderr
    r = cli("admin", "cluster", "-n", cluster, "-c", "DefaultCluster")
    assert json.loads(r.stdout)["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    r = cli("admin", "cluster", "-n", cluster, "-c", "NoSuchCluster")
    assert r.returncode == 2 and "no cluster NoSuchCluster" in r.stderr
    r = cli("admin", "updateSubGroup", "-n", cluster, "-g", "cliLettersG", "-c", "DefaultCluster", "-r", "5")
    assert r.returncode == 0 and '"retryMaxTimes": 5' in r.stdout, r.stdout + r.stderr
    # getBrokerEpoch's -b is a broker name (resolved through -n); this broker is not in controller mode
    r = cli("admin", "epoch", "-n", cluster, "-b", "broker-a")
    assert r.returncode == 2 and f"the broker at {broker_addr} answered code" in r.stderr, r.stderr
    r = cli("admin", "epoch", "-n", cluster, "-b", "broker-z")
    assert r.returncode == 2 and f"no broker broker-z registered with {cluster}" in r.stderr, r.stderr


def test_broker_run_shows_each_start_up_line_once(cluster):
    """`make run`'s output (the name server's and the broker's stdout and stderr in one stream): the
    name server's and the broker's listening lines once each, not once printed and once logged; a
    new store says it was created, not recovered."""
    out = cluster_log[cluster].read_text()
    assert sum("name server listening on" in line for line in out.splitlines()) == 1, out
    broker_lines = [line for line in out.splitlines() if "broker-a" in line and "listening on" in line]
    assert len(broker_lines) == 1 and broker_lines[0].startswith("broker broker-a (DefaultCluster) listening on"), out
    assert sum("created the store at " in line for line in out.splitlines()) == 1, out
    assert "recovered (" not in out, out
