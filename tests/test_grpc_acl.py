"""ACL on the gRPC front (broker.proxy.grpc_acl, proxy.conf enableACL): the real 5.x Python client
signs its calls with its Credentials, and the front checks them against plain_acl.yml as RocketMQ
5.1's proxy does: the signature, then PUB/SUB on topics and groups, before anything reaches a broker."""
from __future__ import annotations

import hmac
from datetime import datetime, timezone
from hashlib import sha1
from pathlib import Path

import pytest

from broker.proxy.config import ProxyConfig
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from broker.store.errors import StoreConfigError
from tests.conftest import free_port, wait_for
from tests.helpers.procs import group_members
from tests.helpers.grpc_front import GrpcFront, front_beside_cluster, py5, py5_produce, stub_of
from tests.helpers.real_clients import Cluster

pytestmark = pytest.mark.timeout(300)

PRODUCER = ("producer5", "producer-secret")
CONSUMER = ("consumer5", "consumer-secret")
ACL_YML = """
accounts:
  - accessKey: producer5
    secretKey: producer-secret
    defaultTopicPerm: DENY
    topicPerms: [AclOk=PUB, AclSubOnly=SUB]
  - accessKey: consumer5
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [AclOk=SUB]
    groupPerms: [acl-group=SUB]
  - accessKey: admin5
    secretKey: admin-secret
    admin: true
"""
ADMIN = ("admin5", "admin-secret")


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-acl")
    acl = root / "plain_acl.yml"
    acl.write_text(ACL_YML)
    with front_beside_cluster(root, front_conf=f"enableACL=true\naclFile={acl}\n") as f:
        for topic in ("AclOk", "AclSubOnly", "AclLater"):
            f.cluster.create_topic(topic)
        f.acl = acl
        yield f


@pytest.fixture
def stub(front):
    with stub_of(front) as s:
        yield s


def signed(account: tuple[str, str] | None, secret: str | None = None):
    """The metadata a 5.x client sends (its Signature.metadata), signed with `secret` if given."""
    md = [("x-mq-client-id", "acl-test")]
    if account is not None:
        now = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        sig = hmac.new((secret or account[1]).encode(), now.encode(), sha1).hexdigest()
        md += [("x-mq-date-time", now), ("authorization", f"MQv2-HMAC-SHA1 Credential={account[0]}, "
                                                          f"SignedHeaders=x-mq-date-time, Signature={sig}")]
    return md


def _send(topic: str) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(
        topic=pb.Resource(name=topic), body=b"acl",
        system_properties=pb.SystemProperties(message_id="0123456789ABCDEF"))])


def test_signed_5x_clients_send_and_receive_within_their_permissions(front):
    sent = py5_produce(front.endpoints, "AclOk", [{"body": f"a{i}", "tag": "t"} for i in range(5)],
                       accessKey=PRODUCER[0], secretKey=PRODUCER[1])
    assert all("messageId" in r for r in sent), sent
    got = py5("receive", front.endpoints, "AclOk", group="acl-group", count=5, accessKey=CONSUMER[0],
              secretKey=CONSUMER[1])
    assert sorted(d["body"] for d in got) == [f"a{i}" for i in range(5)]
    assert {d["messageId"] for d in got} == {r["messageId"] for r in sent}


def test_the_real_client_without_credentials_or_permission_is_refused(front):
    unsigned = py5_produce(front.endpoints, "AclOk", [{"body": "no"}])
    # its QueryRoute is the first call refused (UNAUTHORIZED), and the client reports that much
    assert "failed to fetch topic:AclOk route" in unsigned[0].get("error", ""), unsigned
    forbidden = py5_produce(front.endpoints, "AclSubOnly", [{"body": "no"}], accessKey=PRODUCER[0],
                            secretKey=PRODUCER[1])
    assert "No permission for topic AclSubOnly" in forbidden[0].get("error", ""), forbidden
    # nothing of either reached the broker: the consumer account sees no message on AclOk... beyond
    # those the first test sent and acked
    assert py5("receive", front.endpoints, "AclOk", group="acl-group", count=1, rounds=2,
               accessKey=CONSUMER[0], secretKey=CONSUMER[1]) == []


@pytest.mark.parametrize("account, secret, request_, code, says", [
    (None, None, _send("AclOk"), pb.Code.UNAUTHORIZED, "No accessKey"),
    (("nobody5", "whatever"), None, _send("AclOk"), pb.Code.UNAUTHORIZED, "No acl config for nobody5"),
    (PRODUCER, "wrong-secret", _send("AclOk"), pb.Code.UNAUTHORIZED, "Check signature failed"),
    (PRODUCER, None, _send("AclSubOnly"), pb.Code.FORBIDDEN, "No permission for topic AclSubOnly"),
    (CONSUMER, None, _send("AclOk"), pb.Code.FORBIDDEN, "No permission for topic AclOk (needs PUB)"),
    # passes the ACL (and is then refused for naming no endpoints)
    (PRODUCER, None, spb.QueryRouteRequest(topic=pb.Resource(name="AclSubOnly")), pb.Code.ILLEGAL_ACCESS_POINT, ""),
    (CONSUMER, None, spb.QueryRouteRequest(topic=pb.Resource(name="AclSubOnly")), pb.Code.FORBIDDEN,
     "needs PUB or SUB"),
    (CONSUMER, None, spb.AckMessageRequest(group=pb.Resource(name="other-group"), topic=pb.Resource(name="AclOk"),
                                           entries=[spb.AckMessageEntry(receipt_handle="forged")]),
     pb.Code.FORBIDDEN, "No permission for group other-group"),
    (CONSUMER, None, spb.HeartbeatRequest(group=pb.Resource(name="other-group"), client_type=pb.SIMPLE_CONSUMER),
     pb.Code.FORBIDDEN, "group other-group"),
])
def test_refusals_name_what_is_missing(front, stub, account, secret, request_, code, says):
    call = getattr(stub, type(request_).__name__[:-len("Request")])
    r = call(request_, metadata=signed(account, secret), timeout=30)
    assert r.status.code == code, r
    assert says in r.status.message, r


def test_a_receive_and_a_telemetry_stream_are_refused_too(front, stub):
    receive = spb.ReceiveMessageRequest(group=pb.Resource(name="other-group"), batch_size=1,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name="AclOk")))
    (r,) = list(stub.ReceiveMessage(receive, metadata=signed(CONSUMER), timeout=30))
    assert r.status.code == pb.Code.FORBIDDEN and "group other-group" in r.status.message, r
    settings = spb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="AclSubOnly")])))
    replies = list(stub.Telemetry(iter([settings]), metadata=signed(PRODUCER), timeout=30))
    assert [c.status.code for c in replies] == [pb.Code.FORBIDDEN], replies  # the refusal, then the end
    assert "No permission for topic AclSubOnly" in replies[0].status.message


def test_an_edit_of_plain_acl_applies_without_a_restart(front, stub):
    assert stub.SendMessage(_send("AclLater"), metadata=signed(PRODUCER), timeout=30).status.code == pb.Code.FORBIDDEN
    front.acl.write_text(ACL_YML.replace("AclSubOnly=SUB]", "AclSubOnly=SUB, AclLater=PUB]"))
    try:
        wait_for(lambda: stub.SendMessage(_send("AclLater"), metadata=signed(PRODUCER), timeout=30).status.code
                 == pb.Code.OK, 15, "the edited ACL to apply")
    finally:
        front.acl.write_text(ACL_YML)


def test_enable_acl_without_a_readable_file_is_refused_naming_the_key(tmp_path):
    with pytest.raises(StoreConfigError) as e:
        ProxyConfig(enableACL=True, aclFile=str(tmp_path / "missing.yml")).validate()
    assert e.value.key == "enableACL" and "missing.yml" in str(e.value)
    bad = tmp_path / "bad.yml"
    bad.write_text("accounts:\n  - accessKey: short\n    secretKey: x\n")
    with pytest.raises(StoreConfigError) as e:
        ProxyConfig(enableACL=True, aclFile=str(bad)).validate()
    assert e.value.key == "enableACL" and "at least 6" in str(e.value)


def test_a_broker_with_acl_runs_its_local_front_with_acl_and_an_account_of_its_own(tmp_path):
    """aclEnable and grpcServerPort in broker.conf: the front checks 5.x clients against the broker's
    plain_acl.yml, and reaches the broker, whose ACL refuses unsigned requests, with an admin
    account the broker made for it at start (in neither the file nor a command line)."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    port = free_port()
    with Cluster(tmp_path / "cluster", f"aclEnable=true\naclFile={acl}\ngrpcServerPort={port}\n", access=ADMIN) as c:
        broker = c.procs[1]
        broker.wait_lines(lambda ls: any("grpc proxy listening" in line for line in ls), 60, "the local front")
        c.create_topic("AclOk")
        endpoints = f"127.0.0.1:{port}"
        sent = py5_produce(endpoints, "AclOk", [{"body": f"l{i}"} for i in range(3)], accessKey=PRODUCER[0],
                           secretKey=PRODUCER[1])
        assert all("messageId" in r for r in sent), sent
        got = py5("receive", endpoints, "AclOk", group="acl-group", count=3, accessKey=CONSUMER[0],
                  secretKey=CONSUMER[1])
        assert sorted(d["body"] for d in got) == ["l0", "l1", "l2"]
        refused = py5_produce(endpoints, "AclOk", [{"body": "no"}], accessKey=CONSUMER[0], secretKey=CONSUMER[1])
        assert "No permission for topic AclOk" in refused[0].get("error", ""), refused
        # the front runs in the broker's process: its account is on no command line, in no file
        assert all(b"local-front-" not in Path(f"/proc/{p}/cmdline").read_bytes() for p in group_members(broker.pgid))
        assert "local-front-" not in acl.read_text()


def test_cluster_mode_signs_with_tools_yml_when_asked(tmp_path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YML)
    with Cluster(tmp_path / "cluster", f"aclEnable=true\naclFile={acl}\n", access=ADMIN) as c:
        c.create_topic("AclOk")
        (tmp_path / "plain").mkdir()
        unsigned = GrpcFront(c, tmp_path / "plain")  # the broker refuses what the front sends unsigned
        try:
            [r] = py5_produce(unsigned.endpoints, "AclOk", [{"body": "x"}])
            assert "FORBIDDEN" in r.get("error", "") or "No accessKey" in r.get("error", ""), r
        finally:
            unsigned.close()
        root = tmp_path / "signed"
        root.mkdir()
        (root / "tools.yml").write_text(f"accessKey: {ADMIN[0]}\nsecretKey: {ADMIN[1]}\n")
        front = GrpcFront(c, root, extra_conf="enableAclRpcHookForClusterMode=true\n")
        try:
            sent = py5_produce(front.endpoints, "AclOk", [{"body": "signed"}])
            assert "messageId" in sent[0], sent
            got = py5("receive", front.endpoints, "AclOk", group="any-group", count=1)
            assert [d["body"] for d in got] == ["signed"]
        finally:
            front.close()


def test_enable_acl_rpc_hook_without_tools_yml_is_refused_naming_the_key(tmp_path):
    with pytest.raises(StoreConfigError) as e:
        ProxyConfig(enableAclRpcHookForClusterMode=True, aclToolsFile=str(tmp_path / "tools.yml")).validate()
    assert e.value.key.startswith("enableAclRpcHookForClusterMode") and "does not exist" in str(e.value)
    (tmp_path / "tools.yml").write_text("accessKey: onlyme\n")
    with pytest.raises(StoreConfigError) as e:
        ProxyConfig(enableAclRpcHookForClusterMode=True, aclToolsFile=str(tmp_path / "tools.yml")).validate()
    assert "secretKey" in str(e.value)
