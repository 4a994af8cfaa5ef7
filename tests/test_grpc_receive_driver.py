"""The C driver of the receive cell (bench/grpc_receive.c, built by `make build/grpc_receive`)
against a real `broker serve` with its own gRPC front (grpcServerPort): every message stored is
received once and acked (the driver counts a message only when its AckMessage is answered OK),
the window is marked on stderr, and a group that caught up ends the run with nothing more."""
from __future__ import annotations

import json
import subprocess

import pytest

from bench.processes import free_port
from tests.helpers.procs import REPO
from tests.helpers.real_clients import Cluster

DRIVER = REPO / "build" / "grpc_receive"
TOPIC = "GrpcReceiveDriver"
STORED = 200


@pytest.fixture(scope="module")
def driver() -> str:
    r = subprocess.run(["make", "-s", "build/grpc_receive"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return str(DRIVER)


@pytest.fixture(scope="module")
def front(tmp_path_factory, driver):
    port = free_port()
    with Cluster(tmp_path_factory.mktemp("cluster"), f"grpcServerPort={port}\n") as cluster:
        cluster.procs[1].wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60,
                                    "the broker's front to listen")
        cluster.create_topic(TOPIC)
        r = subprocess.run([str(REPO / "build" / "loadgen"), "send", "--addr", cluster.addr, "--topic", TOPIC,
                            "--count", str(STORED), "--warmup", "0", "--in-flight", "8"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and json.loads(r.stdout)["msgs"] == STORED, r.stderr
        yield f"127.0.0.1:{port}"


def receive(driver: str, endpoints: str, group: str, *args: str) -> tuple[dict, str]:
    p = subprocess.run([driver, "--addr", endpoints, "--topic", TOPIC, "--group", group, "--warmup", "0",
                        "--seconds", "20", "--timeout", "20", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    [line] = p.stdout.strip().splitlines()
    return json.loads(line), p.stderr


def test_source_builds_without_warnings(driver, tmp_path):
    r = subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "gr"),
                        str(REPO / "bench" / "grpc_receive.c"), "-lnghttp2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_stored_message_is_received_and_acked_once(driver, front):
    out, err = receive(driver, front, "driver-a", "--in-flight", "4", "--batch", "32")
    assert out["msgs"] == STORED and out["caught_up"], out
    assert out["acks"] >= STORED // 32 and out["receives"] > out["acks"] and out["empty_receives"] == 4, out
    assert out["seconds"] < 0.9, out  # the window ends with the last ack, not the empty receive's 1 s long poll
    assert 0 < out["receive_p50_us"] <= out["receive_p99_us"] and out["cpu_us_per_msg"] > 0, out
    assert err.count("grpc_receive: window start") == 1 and err.count("grpc_receive: window end") == 1, err
    # the same group again: everything was acked (and is invisible for 30 s besides), nothing comes
    again, _ = receive(driver, front, "driver-a", "--in-flight", "2")
    assert again["msgs"] == 0 and again["caught_up"], again
    # another group reads the topic from its start on its own
    other, _ = receive(driver, front, "driver-b", "--in-flight", "1", "--batch", "7")
    assert other["msgs"] == STORED and other["acks"] >= STORED // 7, other


def test_a_front_that_refuses_fails_the_run_saying_so(driver, front):
    p = subprocess.run([driver, "--addr", front, "--topic", "NoSuchTopicHere", "--group", "driver-c", "--warmup", "0",
                        "--seconds", "5", "--timeout", "20"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "ReceiveMessage answered status" in p.stderr, (p.returncode, p.stderr)


def test_settings_first_and_deadlines_as_a_5x_client_sends_them(driver, front):
    """--telemetry opens a Telemetry stream with a SimpleConsumer's Settings and waits for the
    front's answer before the receives start; --deadline sends each call's grpc-timeout (the
    Java proxy needs both, bench/java_bench.py's receive pair): the run is the same."""
    from bench.grpc_bench import consumer_settings
    out, _ = receive(driver, front, "driver-d", "--in-flight", "4", "--telemetry",
                     consumer_settings(front, "driver-d", TOPIC).hex(), "--deadline", "3")
    assert out["msgs"] == STORED and out["caught_up"], out
    p = subprocess.run([driver, "--addr", front, "--topic", TOPIC, "--group", "driver-e", "--telemetry", "0a0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "--telemetry: an odd number of hex digits" in p.stderr, p.stderr
