"""The C load generator of the benchmark (bench/loadgen.c, built by `make build/loadgen`).

Against a real `broker serve` (tests.helpers.real_clients.Cluster): every mode runs ~1 s with no
error, pull reads back exactly what send and batch stored (count and body bytes), --count sends
exactly that many, replies with an error code are counted as errors, and the broker's CPU per
process (bench.proc_cpu) is read over loadgen's window. Against a fake server on a socket of the
test's own: the frames are those of a 4.x Java client (JSON header as fastjson writes it, the
batch body as MessageDecoder.encodeMessages writes it, the ROCKETMQ binary header), and a server
that drops the connection makes loadgen fail, saying so.
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time

import msgspec
import pytest

from broker.remoting.message_batch import decode_batch
from tests.conftest import wait_for
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster

LOADGEN = REPO / "build" / "loadgen"
FIELDS = {"mode", "msgs", "seconds", "msgs_per_s", "mb_per_s", "p50_us", "p99_us", "p999_us", "errors",
          "cpu_user_s", "cpu_sys_s", "cpu_us_per_msg"}
UNIQ = re.compile(r"^UNIQ_KEY\x01[0-9A-F]{32}\x02WAIT\x01true$")


@pytest.fixture(scope="module")
def loadgen() -> str:
    """Built through the Makefile's rule, as `make bench` and `make test` build it."""
    r = subprocess.run(["make", "-s", "build/loadgen"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return str(LOADGEN)


def test_source_builds_without_warnings(loadgen, tmp_path):
    """C11, libc only, clean under -Wall -Wextra (a warning there is usually a real bug)."""
    r = subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "lg"),
                        str(REPO / "bench" / "loadgen.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def run(loadgen: str, mode: str, addr: str, *args: str, check: bool = True) -> dict | subprocess.CompletedProcess:
    p = subprocess.run([loadgen, mode, "--addr", addr, "--timeout", "20", *args], capture_output=True, text=True,
                       timeout=120)
    if not check:
        return p
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout  # one JSON line, nothing else on stdout
    out = json.loads(lines[0])
    assert FIELDS <= out.keys(), FIELDS - out.keys()
    # the window is marked on stderr, once each, for callers reading other processes' CPU
    assert p.stderr.count("loadgen: window start") == 1 and p.stderr.count("loadgen: window end") == 1, p.stderr
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("loadgen")) as c:
        yield c


def sane(r: dict, mode: str) -> None:
    assert r["mode"] == mode
    assert r["errors"] == 0 and r["error_codes"] == {}, r
    assert r["msgs"] > 0 and r["seconds"] > 0
    assert r["msgs_per_s"] == pytest.approx(r["msgs"] / r["seconds"], rel=1e-3)
    assert 0 < r["p50_us"] <= r["p99_us"] <= r["p999_us"]
    assert r["cpu_user_s"] + r["cpu_sys_s"] > 0
    assert r["cpu_us_per_msg"] == pytest.approx((r["cpu_user_s"] + r["cpu_sys_s"]) * 1e6 / r["msgs"], rel=1e-2)


def test_send_batch_then_pull_reads_back_exactly(loadgen, cluster):
    topic, body = "LoadgenRoundTrip", 700
    send = run(loadgen, "send", cluster.addr, "--topic", topic, "--body", str(body), "--in-flight", "16",
               "--connections", "2", "--seconds", "1", "--warmup", "0.2")
    sane(send, "send")
    assert send["body_bytes"] == send["msgs"] * body
    batch = run(loadgen, "batch", cluster.addr, "--topic", topic, "--body", str(body), "--batch", "8",
                "--in-flight", "4", "--seconds", "1", "--warmup", "0.2")
    sane(batch, "batch")
    assert batch["msgs"] == 8 * batch["requests"]
    # every acknowledged message, warm-up and drain included, is in the topic's 4 queues
    stored = send["msgs_total"] + batch["msgs_total"]
    wait_for(lambda: cluster.total(topic) == stored, 20, f"{stored} messages dispatched")

    pull = run(loadgen, "pull", cluster.addr, "--topic", topic, "--in-flight", "3", "--max-msgs", "50",
               "--seconds", "60")
    sane(pull, "pull")
    assert pull["max_offsets_total"] == stored
    assert pull["msgs"] == stored and pull["msgs_total"] == stored
    assert pull["body_bytes"] == stored * body
    assert pull["record_bytes"] > pull["body_bytes"]  # headers, topic, properties around each body
    assert pull["requests"] >= stored / 50

    # what loadgen stored is what a 4.x producer stores: its properties (as RocketMQ keeps them: with
    # the broker's CLUSTER), its queues, its body size
    records = cluster.records(topic, 1)
    assert records and all(len(m.body) == body and m.queue_id == 1 for m in records)
    assert all(m.properties.get("CLUSTER") == "DefaultCluster" and m.properties.get("WAIT") == "true"
               and re.fullmatch(r"[0-9A-F]{32}", m.properties["UNIQ_KEY"])
               for m in records)


def test_count_sends_exactly_that_many(loadgen, cluster):
    r = run(loadgen, "send", cluster.addr, "--topic", "LoadgenCount", "--count", "500", "--warmup", "0",
            "--in-flight", "8", "--queues", "2")
    sane(r, "send")
    assert r["msgs"] == r["requests"] == r["msgs_total"] == 500
    wait_for(lambda: cluster.total("LoadgenCount", 2) == 500, 20, "500 messages dispatched")
    assert cluster.max_offset("LoadgenCount", 0) == cluster.max_offset("LoadgenCount", 1) == 250  # round robin


def test_error_replies_are_counted(loadgen, cluster):
    """A topic of 2 queues sent to round robin over 4: queues 2 and 3 are refused (INVALID_PARAMETER,
    as RocketMQ 5.5.0 refuses them)."""
    run(loadgen, "send", cluster.addr, "--topic", "LoadgenErrors", "--queues", "2", "--count", "2", "--warmup", "0")
    r = run(loadgen, "send", cluster.addr, "--topic", "LoadgenErrors", "--queues", "4", "--count", "400",
            "--warmup", "0", "--in-flight", "1")
    assert r["requests"] == 400 and r["msgs"] == 200 and r["errors"] == 200
    assert r["error_codes"] == {"29": 200}
    assert "queueId" in r["first_error"]  # the broker's remark, as it wrote it


def test_broker_cpu_per_process_over_the_window(loadgen, cluster):
    from bench import loadgen as driver
    broker_pid = cluster.procs[1].proc.pid
    r = driver.measure("send", cluster.addr, broker_pid, topic="LoadgenCpu", seconds=1, warmup=0.2, in_flight=32)
    per = r["broker_cpu_us_per_msg"]
    # the broker, its commit log's warm-ahead thread (ASYNC_FLUSH: store.warm_ahead) and its
    # segment allocation threads (their CPU after they ended too) counted apart by their OS thread
    # names, each of its service processes (children found through /proc), then the total
    assert list(per) == ["broker", "warm-ahead", "allocate", "flush", "reput", "ha", "clean", "total"], per
    assert per["broker"] > 0 and per["reput"] >= 0 and per["warm-ahead"] >= 0
    assert per["total"] == pytest.approx(sum(v for k, v in per.items() if k != "total"))


# -- the wire, against a server of the test's own ------------------------------------------------------


class FakeBroker:
    """Accepts one connection, records every request frame, answers each with code 0 in the
    request's serialization (as a Java broker does), or drops the connection after `drop_after`."""

    def __init__(self, drop_after: int | None = None):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.frames: list[tuple[int, bytes, bytes]] = []  # (serialize type, header, body)
        self.drop_after = drop_after
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            f = conn.makefile("rb")
            while True:
                head = f.read(8)
                if len(head) < 8:
                    return
                length, word = int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")
                rest = f.read(length - 4)
                kind, hl = word >> 24, word & 0xFFFFFF
                self.frames.append((kind, rest[:hl], rest[hl:]))
                if self.drop_after is not None and len(self.frames) >= self.drop_after:
                    return
                opaque = (json.loads(rest[:hl])["opaque"] if kind == 0 else int.from_bytes(rest[5:9], "big"))
                if kind == 0:
                    h = msgspec.json.encode({"code": 0, "flag": 1, "language": "JAVA", "opaque": opaque,
                                             "extFields": {"msgId": "X", "queueId": "0", "queueOffset": "0"},
                                             "serializeTypeCurrentRPC": "JSON", "version": 395})
                else:  # code, language, version, opaque, flag (response), no remark, no ext fields
                    h = (0).to_bytes(2, "big") + b"\0" + (395).to_bytes(2, "big") + opaque.to_bytes(4, "big") + \
                        (1).to_bytes(4, "big") + bytes(8)
                conn.sendall((4 + len(h)).to_bytes(4, "big") + ((kind << 24) | len(h)).to_bytes(4, "big") + h)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(10)


def rocketmq_header(h: bytes) -> tuple[int, int, dict]:
    """(code, opaque, extFields) of a ROCKETMQ binary header (docs/formats.md §4)."""
    code, opaque = int.from_bytes(h[0:2], "big"), int.from_bytes(h[5:9], "big")
    rl = int.from_bytes(h[13:17], "big")
    pos = 17 + rl
    end = pos + 4 + int.from_bytes(h[pos:pos + 4], "big")
    pos += 4
    ext = {}
    while pos < end:
        kl = int.from_bytes(h[pos:pos + 2], "big")
        k = h[pos + 2:pos + 2 + kl].decode()
        vl = int.from_bytes(h[pos + 2 + kl:pos + 6 + kl], "big")
        ext[k] = h[pos + 6 + kl:pos + 6 + kl + vl].decode()
        pos += 6 + kl + vl
    assert pos == end
    return code, opaque, ext


def test_send_frames_are_a_java_clients(loadgen):
    fake = FakeBroker()
    try:
        r = run(loadgen, "send", fake.addr, "--topic", "T", "--queues", "2", "--body", "10", "--count", "4",
                "--warmup", "0", "--in-flight", "2", "--group", "pg")
    finally:
        fake.close()
    sane(r, "send")
    assert r["msgs"] == 4 and len(fake.frames) == 4
    uniq = set()
    for i, (kind, header, body) in enumerate(fake.frames):
        assert kind == 0 and len(body) == 10
        assert b"\\u0001" in header and b"\x01" not in header  # control characters escaped, as fastjson
        h = json.loads(header)
        assert list(h) == ["code", "extFields", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version"]
        assert h["code"] == 310 and h["flag"] == 0 and h["language"] == "JAVA"
        ext = h["extFields"]
        assert list(ext) == list("abcdefghijkm") and all(isinstance(v, str) for v in ext.values())
        assert (ext["a"], ext["b"], ext["c"], ext["d"]) == ("pg", "T", "TBW102", "2")
        assert (ext["f"], ext["h"], ext["j"], ext["k"], ext["m"]) == ("0", "0", "0", "false", "false")
        assert abs(int(ext["g"]) - time.time() * 1000) < 60_000  # bornTimestamp: the wall clock, ms
        assert ext["e"] == str(i % 2)  # round robin over the queues
        assert UNIQ.match(ext["i"]), ext["i"]
        uniq.add(ext["i"])
    assert len(uniq) == 4
    assert len({json.loads(h)["opaque"] for _, h, _ in fake.frames}) == 4


def test_batch_body_is_encode_messages(loadgen):
    fake = FakeBroker()
    try:
        r = run(loadgen, "batch", fake.addr, "--body", "33", "--batch", "5", "--count", "10", "--warmup", "0")
    finally:
        fake.close()
    assert r["msgs"] == 10 and len(fake.frames) == 2
    for kind, header, body in fake.frames:
        h = json.loads(header)
        assert h["code"] == 320 and h["extFields"]["m"] == "true" and h["extFields"]["i"] == "WAIT\x01true"
        bodies, props, flags = decode_batch(body)  # the broker's own decoder
        assert [len(b) for b in bodies] == [33] * 5 and flags == [0] * 5
        assert all(UNIQ.match(bytes(p).decode()) for p in props)


def test_rocketmq_serialization(loadgen):
    fake = FakeBroker()
    try:
        r = run(loadgen, "send", fake.addr, "--serialize", "rocketmq", "--count", "3", "--warmup", "0",
                "--in-flight", "1", "--body", "5", "--topic", "TopicR")
    finally:
        fake.close()
    assert r["msgs"] == 3 and r["errors"] == 0  # the binary replies were parsed and matched
    opaques = set()
    for kind, header, body in fake.frames:
        code, opaque, ext = rocketmq_header(header)
        assert kind == 1 and code == 310 and len(body) == 5
        assert ext["b"] == "TopicR" and UNIQ.match(ext["i"])
        opaques.add(opaque)
    assert len(opaques) == 3


def test_a_dropped_connection_fails_the_run(loadgen):
    fake = FakeBroker(drop_after=3)
    try:
        p = run(loadgen, "send", fake.addr, "--seconds", "5", "--warmup", "0", "--in-flight", "4", check=False)
    finally:
        fake.close()
    assert p.returncode == 1 and p.stdout == ""
    # the drop shows as EOF, a reset or, when loadgen's next write comes first, a broken pipe
    assert "closed" in p.stderr or "reset" in p.stderr or "Broken pipe" in p.stderr, p.stderr
