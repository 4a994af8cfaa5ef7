"""TLS on the gRPC front (broker.proxy.tls): tls.server.mode=enforcing with a certificate made by
openssl in the test, served to the real 5.x Python client (its own tls_enable, the certificate
trusted through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH); a plaintext client is refused at once with
UNAVAILABLE, not left waiting; a certificate or key that cannot be read is refused at start,
naming its key, by `broker proxy` and by a broker whose grpcServerPort runs the front."""
from __future__ import annotations

import asyncio

import ssl
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from broker.proxy.config import ProxyConfig
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.protocol import service_pb2_grpc as rpc
from broker.store.errors import StoreConfigError
from tests.conftest import free_port
from tests.helpers.grpc_front import front_beside_cluster, py5, py5_produce
from tests.helpers.real_clients import Cluster

pytestmark = pytest.mark.timeout(300)

MD = (("x-mq-client-id", "tls-test-client"),)


def make_certificate(d: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM, the key unencrypted)."""
    key, cert = d / "server.key", d / "server.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def tls_front(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-tls")
    cert, key = make_certificate(root)
    # TlsSystemConfig's names for the mode and the test mode, the proxy's for the files
    with front_beside_cluster(root, front_conf=f"tls.server.mode=enforcing\ntls.test.mode.enable=false\n"
                                               f"tlsCertPath={cert}\ntlsKeyPath={key}\n") as f:
        f.cert = cert
        yield f


def test_the_5x_client_sends_and_receives_over_tls(tls_front):
    topic = "GrpcTls"
    tls_front.cluster.create_topic(topic)
    trust = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(tls_front.cert)}
    sent = [{"tag": "T", "keys": [f"k{i}"], "body": f"tls-{i}"} for i in range(3)]
    receipts = py5_produce(tls_front.endpoints, topic, sent, tls=True, env=trust)
    assert all("messageId" in r for r in receipts), receipts
    got = py5("receive", tls_front.endpoints, topic, env=trust, tls=True, group="tls-5x", count=3, rounds=10)
    assert sorted(d["body"] for d in got) == [m["body"] for m in sent], got
    assert {d["messageId"] for d in got} == {r["messageId"] for r in receipts}


def _heartbeat(channel) -> spb.HeartbeatResponse:
    return rpc.MessagingServiceStub(channel).Heartbeat(spb.HeartbeatRequest(), metadata=MD, timeout=60)


def test_the_front_presents_the_configured_certificate_and_verifies_with_it(tls_front):
    pem = ssl.get_server_certificate(("127.0.0.1", tls_front.port))
    assert ssl.PEM_cert_to_DER_cert(pem) == ssl.PEM_cert_to_DER_cert(tls_front.cert.read_text())
    creds = grpc.ssl_channel_credentials(root_certificates=tls_front.cert.read_bytes())
    with grpc.secure_channel(tls_front.endpoints, creds) as channel:
        assert _heartbeat(channel).status.code == pb.Code.OK


def test_a_plaintext_client_is_refused_at_once(tls_front):
    """A plaintext HTTP/2 client fails UNAVAILABLE (the handshake fails), well before its deadline:
    a hang would end DEADLINE_EXCEEDED instead."""
    with grpc.insecure_channel(tls_front.endpoints) as channel:
        with pytest.raises(grpc.RpcError) as e:
            _heartbeat(channel)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
    # the real 5.x client: without tls_enable, or with it but not trusting the certificate, its send
    # fails and says so (no route fetched), it does not wait
    for opt in ({}, {"tls": True}):
        [line] = py5("produce", tls_front.endpoints, "GrpcTls", messages=[{"body": "refused"}], **opt)
        assert "error" in line and "messageId" not in line, line


def test_test_mode_serves_a_self_signed_certificate(tmp_path):
    """tls.server.mode=enforcing alone: tlsTestModeEnable is true by default, as the Java proxy's,
    and the front serves a certificate it made at start."""
    with front_beside_cluster(tmp_path, front_conf="tls.server.mode=enforcing\n") as f:
        assert "self-signed" in "".join(f.child.lines)
        pem = ssl.get_server_certificate(("127.0.0.1", f.port))
        assert pem.startswith("-----BEGIN CERTIFICATE-----")


@pytest.mark.parametrize("props, key", [
    ({"tls.server.mode": "permissive"}, "tls.server.mode"),
    ({"tls.server.mode": "on"}, "tls.server.mode"),
    ({"tls.server.mode": "enforcing", "tlsTestModeEnable": "false"}, "tlsCertPath"),
    ({"tls.server.mode": "enforcing", "tlsTestModeEnable": "false", "tlsCertPath": "{missing}"}, "tlsCertPath"),
    ({"tls.server.mode": "enforcing", "tlsTestModeEnable": "false", "tlsCertPath": "{cert}",
      "tlsKeyPath": "{dir}"}, "tlsKeyPath"),  # a directory: unreadable as a file, even by root
    ({"tls.server.mode": "enforcing", "tlsTestModeEnable": "false", "tlsCertPath": "{cert}",
      "tlsKeyPath": "{notpem}"}, "tlsKeyPath"),
    ({"tls.test.mode.enable": "false", "tlsTestModeEnable": "true"}, "tls.test.mode.enable"),
])
def test_bad_tls_config_is_refused_naming_the_key(tmp_path, props, key):
    cert, _ = make_certificate(tmp_path)
    (tmp_path / "notpem").write_text("not a key")
    paths = {"missing": tmp_path / "missing.pem", "cert": cert, "dir": tmp_path, "notpem": tmp_path / "notpem"}
    with pytest.raises(StoreConfigError) as e:
        ProxyConfig.from_properties({k: v.format(**paths) for k, v in props.items()})
    assert e.value.key == key


def test_a_missing_certificate_refuses_the_front_and_the_broker_naming_the_key(tmp_path):
    missing = tmp_path / "missing.pem"
    conf = tmp_path / "proxy.conf"
    conf.write_text(f"namesrvAddr=127.0.0.1:9\ngrpcServerPort={free_port()}\ntls.server.mode=enforcing\n"
                    f"tlsTestModeEnable=false\ntlsCertPath={missing}\ntlsKeyPath={missing}\n")
    r = subprocess.run([sys.executable, "-m", "broker.cli", "proxy", "-c", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "tlsCertPath" in r.stderr and str(missing) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerIP1=127.0.0.1\nlistenPort={free_port()}\nstorePathRootDir={tmp_path}/store\n"
                    f"namesrvAddr=127.0.0.1:9\ngrpcServerPort={free_port()}\ntls.server.mode=enforcing\n"
                    f"tls.test.mode.enable=false\ntls.server.certPath={missing}\ntls.server.keyPath={missing}\n")
    r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "-c", str(conf)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "tlsCertPath" in r.stderr and str(missing) in r.stderr, r.stderr
    assert not (tmp_path / "store" / "commitlog").exists()  # refused before the store was touched


def test_local_mode_front_serves_tls_from_broker_conf(tmp_path):
    """broker.conf with grpcServerPort and TlsSystemConfig's names: the broker's own front serves TLS,
    and so does its remoting port (tls.server.mode is one setting, as RocketMQ's TlsSystemConfig):
    the front reaches its broker over TLS, a plaintext remoting client is refused."""
    cert, key = make_certificate(tmp_path)
    port = free_port()
    with Cluster(tmp_path / "cluster", f"grpcServerPort={port}\ntls.server.mode=enforcing\ntls.test.mode.enable=false\n"
                                       f"tls.server.certPath={cert}\ntls.server.keyPath={key}\n") as cluster:
        cluster.procs[1].wait_lines(lambda ls: any("grpc proxy listening" in line and "TLS" in line for line in ls),
                                    60, "the broker's front to listen with TLS")
        # the topic is made on first use (the name server's autoCreateTopicEnable routes it)
        [r] = py5_produce(f"127.0.0.1:{port}", "GrpcLocalTls", [{"body": "local"}], tls=True,
                          env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(cert)})
        assert "messageId" in r, r
        with pytest.raises((ConnectionError, OSError, asyncio.TimeoutError)):
            cluster.create_topic("PlaintextRefused")
