"""Hostile input (issue 7) against the broker as a real process (`broker serve`, logging to its
stderr), spoken to over raw sockets: garbage bytes, truncated frames, 2 GiB length prefixes,
wrong JSON types in headers and bodies, unknown codes, a client sending one byte a second, 1,000
idle connections, a pull for a queue that does not exist, a send to a 200-byte topic name.

Each time the broker either answers (an error code whose remark names the field) or closes that
connection alone with a log line saying why; a well-behaved connection, open throughout, is
served during and after; and the broker's RSS (psutil) stays bounded.

What the broker does with each:
- a frame that cannot be valid (a length below 4 or over 16 MiB, which a 2 GiB prefix is either
  way: 0x80000000 reads as Java's negative int), a header longer than its frame, an unknown
  serialize type, the ROCKETMQ binary header (type 1, not spoken here), a header that is not a
  JSON object of the right types (code "abc", extFields [1,2], non-UTF-8, nested 100,000 deep):
  the connection is closed, one WARNING "closing connection from <peer>: <reason>" (as Java's
  NettyDecoder closes the channel on a decode failure); no opaque can be trusted to answer with;
- a request whose header parses but whose fields are wrong (queueId "x", a missing topic, a
  sysFlag past Java's int, a bornTimestamp past its long, a heartbeat or lock body of the wrong
  shape, a group that cannot name a retry topic): SYSTEM_ERROR with a remark naming the field, on
  a connection that stays open; an unknown code: REQUEST_CODE_NOT_SUPPORTED;
- a pull for a topic that does not exist: TOPIC_NOT_EXIST, for a queue it does not have:
  SYSTEM_ERROR "queueId[..] is illegal" (PullMessageProcessor's codes), nothing logged;
- a send to a topic name over 127 bytes or with a character outside [%|a-zA-Z0-9_-]: SYSTEM_ERROR
  naming the rule (TopicValidator), nothing stored, the connection kept;
- a peer that hangs up in the middle of a frame: one WARNING "... closed with N bytes of an
  incomplete frame unread", nothing of it handled;
- idle connections: kept, costing no receive buffer until their first byte, until
  serverChannelMaxIdleTimeSeconds (RocketMQ's 120 s default) passes without a read or a write;
  a client trickling bytes is never idle (as Java's ALL_IDLE), and does not hold up the others.
"""
from __future__ import annotations

import itertools
import re
import socket
import time

import msgspec
import psutil
import pytest

from broker.remoting import codes
from broker.server.broker_config import load_broker_config
from broker.store.errors import StoreConfigError
from tests.helpers.procs import wait_until
from tests.helpers.raw_wire import BrokerLog, RawConn, bodies, frame, header, pull, send_message
from tests.helpers.real_clients import Cluster

MiB = 1 << 20
TOPIC = "Hostile"
_seq = itertools.count()


class Env:
    """The module's broker, its process, and a well-behaved connection open from start to end."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.port = cluster.port
        self.proc = psutil.Process(cluster.procs[1].proc.pid)
        self.log_path = cluster.root / "broker.err"
        self.good = RawConn(self.port)
        round_trip(self.good)  # the topic exists and commit-log offset 0 holds a message
        self.rss0 = self.rss()
        self.hwm0 = self.hwm()

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def hwm(self) -> int:
        """Peak RSS so far (VmHWM): a buffer allocated and freed between two rss() calls shows here."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    def runtime(self) -> dict:
        r = self.good.request(codes.GET_BROKER_RUNTIME_INFO)
        return msgspec.json.decode(bytes(r.body))["table"]

    def topics(self) -> set:
        r = self.good.request(codes.GET_ALL_TOPIC_CONFIG)
        return set(msgspec.json.decode(bytes(r.body))["topicConfigTable"])

    def served(self) -> None:
        """The long-lived connection and a new one each get a send and its pull-back right."""
        round_trip(self.good)
        fresh = RawConn(self.port)
        try:
            round_trip(fresh)
        finally:
            fresh.close()


def round_trip(conn: RawConn, topic: str = TOPIC) -> None:
    body = f"well-behaved {next(_seq)}".encode()
    r = send_message(conn, topic, body)
    assert r.code == codes.SUCCESS, (r.code, r.remark)
    got = pull(conn, topic, 0, int(r.ext["queueOffset"]), 1)  # read-your-writes: no wait needed
    assert got.code == codes.SUCCESS and bodies(got) == [body], (got.code, got.remark)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with Cluster(tmp_path_factory.mktemp("hostile")) as c:
        e = Env(c)
        try:
            yield e
        finally:
            e.good.close()


def _json(obj) -> bytes:
    return msgspec.json.encode(obj)


_NESTED = b"[" * 100_000 + b"]" * 100_000

# (id, the bytes, what the broker's log line must say)
BAD_FRAMES = [
    ("http-request", b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n", r"length 1195725856 exceeds the limit of 16777216 bytes"),
    ("garbage", b"\xde\xad\xbe\xef" * 64, r"length -559038737 is below 4"),
    ("2GiB-length", (1 << 31).to_bytes(4, "big") + bytes(64), r"length -2147483648 is below 4"),
    ("2GiB-minus-1-length", (2**31 - 1).to_bytes(4, "big") + bytes(64), r"length 2147483647 exceeds the limit of 16777216"),
    ("4GiB-minus-1-length", b"\xff\xff\xff\xff" + bytes(64), r"length -1 is below 4"),
    ("length-below-4", (2).to_bytes(4, "big") + bytes(8), r"length 2 is below 4"),
    ("header-longer-than-frame", (12).to_bytes(4, "big") + (100).to_bytes(4, "big") + bytes(8),
     r"header length 100 exceeds the frame length 12"),
    # -16 as Java's int: the low 24 bits (16777200) are the header length, checked first
    ("negative-header-length", (12).to_bytes(4, "big") + b"\xff\xff\xff\xf0" + bytes(8),
     r"header length 16777200 exceeds the frame length 12"),
    ("serialize-type-5", (12).to_bytes(4, "big") + b"\x05\x00\x00\x02" + b"{}" + bytes(6), r"unknown serialize type 5"),
    ("rocketmq-binary-garbage", frame(b"\x00\x1e\x00\x01\x8b\x00\x00\x00garbage", serialize_type=1),
     r"a ROCKETMQ header has at least 21 bytes, this one 15"),
    ("not-json", frame(b"not json at all!"), r"a header must be a JSON object \(at byte 0"),
    ("empty-header", frame(b""), r"header"),
    ("non-utf8-header", frame(b'{"code":30,"opaque":1,"remark":"\xff\xfe"}'), r"invalid UTF-8 byte 0xff \(at byte 32"),
    ("json-array-header", frame(b"[30,1]"), r"a header must be a JSON object"),
    ("code-abc", frame(_json({"code": "abc", "opaque": 1})), r"code is the string b'\"abc\"', not a 32-bit integer"),
    ("code-float", frame(_json({"code": 30.5, "opaque": 1})), r"code is b'30\.5', not a 32-bit integer"),
    ("code-past-int64", frame(_json({"code": 10**20, "opaque": 1})), r"code is b'100000000000000000000', not a 32-bit"),
    ("extFields-list", frame(_json({"code": 30, "opaque": 2, "extFields": [1, 2]})), r"extFields must be an object or null"),
    ("opaque-float", frame(_json({"code": 30, "opaque": 1.5})), r"opaque is b'1\.5', not a 32-bit integer"),
    ("flag-string", frame(_json({"code": 30, "opaque": 1, "flag": "x"})), r"flag is the string b'\"x\"', not a 32-bit"),
    ("nested-100000-deep", frame(b'{"code":30,"opaque":3,"extFields":{"a":' + _NESTED + b"}}"),
     r"nested deeper than 32"),
]


@pytest.mark.parametrize("data, reason", [c[1:] for c in BAD_FRAMES], ids=[c[0] for c in BAD_FRAMES])
def test_a_bad_frame_closes_its_connection_alone_and_the_log_says_why(env, data, reason):
    log = BrokerLog(env.log_path)
    rss = env.rss()
    bad = RawConn(env.port)
    try:
        bad.send(data)
        assert bad.closed_by_peer(10), "the broker kept the connection open"
    finally:
        bad.close()
    log.wait(rf"WARNING closing connection from {re.escape(bad.peer)}: .*{reason}")
    env.served()
    assert env.rss() - rss < 32 * MiB  # nothing of the declared length was allocated
    assert "Traceback" not in log.text()


def test_a_huge_declared_frame_buffers_only_what_arrives_then_a_hang_up_is_logged(env):
    """A 16 MiB frame (the limit) announced, 1 KiB of it sent: the broker holds 1 KiB, not 16 MiB,
    serves the others meanwhile, and says so when the peer hangs up half-way."""
    log = BrokerLog(env.log_path)
    hwm, rss = env.hwm(), env.rss()
    bad = RawConn(env.port)
    try:
        bad.send((16 * MiB).to_bytes(4, "big") + (200).to_bytes(4, "big") + bytes(1024))
        env.served()
        assert bad.is_open()
        bad.sock.shutdown(socket.SHUT_WR)
        assert bad.closed_by_peer(10)
    finally:
        bad.close()
    log.wait(rf"WARNING connection from {re.escape(bad.peer)} closed with 1032 bytes of an incomplete frame unread "
             r"\(end of stream\)")
    assert env.rss() - rss < 8 * MiB and env.hwm() - hwm < 8 * MiB
    env.served()


@pytest.mark.parametrize("how", ["eof", "reset"])
def test_a_truncated_frame_then_a_hang_up_stores_nothing_and_is_logged(env, how):
    log = BrokerLog(env.log_path)
    topic = f"Truncated{how}"
    whole = frame(header(codes.SEND_MESSAGE, {"producerGroup": "pg", "topic": topic, "queueId": 0, "properties": ""}),
                  b"x" * 500)
    bad = RawConn(env.port)
    try:
        bad.send(whole[:-7])
        env.served()  # the half frame holds up no one
        before = int(env.runtime()["commitLogMaxOffset"])
        if how == "eof":
            bad.sock.shutdown(socket.SHUT_WR)
            assert bad.closed_by_peer(10)
        else:  # SO_LINGER 0: close() sends a reset
            bad.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    finally:
        bad.close()
    why = r"end of stream" if how == "eof" else r".*reset by peer"
    log.wait(rf"WARNING connection from {re.escape(bad.peer)} closed with {len(whole) - 7} bytes of an incomplete "
             rf"frame unread \({why}\)")
    assert topic not in env.topics()
    assert int(env.runtime()["commitLogMaxOffset"]) == before
    env.served()


_SEND = {"producerGroup": "pg", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "queueId": 0,
         "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": "", "reconsumeTimes": 0}
_PULL = {"consumerGroup": "cg", "topic": TOPIC, "queueId": 0, "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 0,
         "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


# (id, code, extFields, body, answer code, what the remark must say)
ANSWERED = [
    ("send-queueId-string", codes.SEND_MESSAGE, {**_SEND, "queueId": "x"}, b"m", codes.SYSTEM_ERROR,
     r"queueId is 'x', not an integer"),
    ("send-v2-queueId-list", codes.SEND_MESSAGE_V2, {"a": "pg", "b": TOPIC, "e": [1], "i": ""}, b"m", codes.SYSTEM_ERROR,
     r"queueId is '\[1\]', not an integer"),
    ("send-queueId-object", codes.SEND_MESSAGE, {**_SEND, "queueId": {"a": 1}}, b"m", codes.SYSTEM_ERROR,
     r"queueId is '\{\"a\":1\}', not an integer"),
    ("send-without-topic", codes.SEND_MESSAGE, _without(_SEND, "topic"), b"m", codes.SYSTEM_ERROR,
     r"the request has no topic"),
    ("send-sysFlag-past-int32", codes.SEND_MESSAGE, {**_SEND, "sysFlag": 2**31}, b"m", codes.SYSTEM_ERROR,
     r"sysFlag is 2147483648, out of range for a 32-bit integer"),
    ("send-flag-past-int32", codes.SEND_MESSAGE, {**_SEND, "flag": -2**31 - 1}, b"m", codes.SYSTEM_ERROR,
     r"flag is -2147483649, out of range for a 32-bit integer"),
    ("send-bornTimestamp-past-int64", codes.SEND_MESSAGE, {**_SEND, "bornTimestamp": 10**25}, b"m", codes.SYSTEM_ERROR,
     r"bornTimestamp is 10000000000000000000000000, out of range for a 64-bit integer"),
    ("send-reconsumeTimes-string-past-int32", codes.SEND_MESSAGE, {**_SEND, "reconsumeTimes": "99999999999"}, b"m",
     codes.SYSTEM_ERROR, r"reconsumeTimes is '99999999999', out of range for a 32-bit integer"),
    ("pull-queueOffset-string", codes.PULL_MESSAGE, {**_PULL, "queueOffset": "abc"}, b"", codes.SYSTEM_ERROR,
     r"queueOffset is 'abc', not an integer"),
    ("pull-without-consumerGroup", codes.PULL_MESSAGE, _without(_PULL, "consumerGroup"), b"", codes.SYSTEM_ERROR,
     r"the request has no consumerGroup"),
    ("pull-queueOffset-past-int64", codes.PULL_MESSAGE, {**_PULL, "queueOffset": 2**63}, b"", codes.SYSTEM_ERROR,
     r"queueOffset is 9223372036854775808, out of range for a 64-bit integer"),
    ("commitOffset-past-int64", codes.UPDATE_CONSUMER_OFFSET,
     {"consumerGroup": "hostile-commit", "topic": TOPIC, "queueId": 0, "commitOffset": 10**25}, b"", codes.SYSTEM_ERROR,
     r"commitOffset is 10000000000000000000000000, out of range"),
    ("max-offset-queueId-bool-list", codes.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": [True]}, b"", codes.SYSTEM_ERROR,
     r"queueId is '\[true\]', not an integer"),
    ("heartbeat-not-json", codes.HEART_BEAT, None, b"\xff not json", codes.SYSTEM_ERROR, r"heartbeat body is not JSON"),
    ("heartbeat-nested-100000-deep", codes.HEART_BEAT, None, _NESTED, codes.SYSTEM_ERROR, r"heartbeat body is not JSON"),
    ("heartbeat-consumerDataSet-of-ints", codes.HEART_BEAT, None, _json({"clientID": "c", "consumerDataSet": [1]}),
     codes.SYSTEM_ERROR, r"consumerDataSet is not a list of objects"),
    ("heartbeat-groupName-list", codes.HEART_BEAT, None,
     _json({"clientID": "c", "consumerDataSet": [{"groupName": [1]}]}), codes.SYSTEM_ERROR,
     r"consumerDataSet\[0\]\.groupName is not a string"),
    ("heartbeat-codeSet-strings", codes.HEART_BEAT, None, _json({"clientID": "c", "consumerDataSet": [
        {"groupName": "hostile-codes", "subscriptionDataSet": [{"topic": TOPIC, "subString": "a", "codeSet": ["x"]}]}]}),
     codes.SYSTEM_ERROR, r"codeSet holds a non-integer"),
    ("heartbeat-group-with-a-path", codes.HEART_BEAT, None,
     _json({"clientID": "c", "consumerDataSet": [{"groupName": "../../etc"}]}), codes.SYSTEM_ERROR,
     r"topic '%RETRY%\.\./\.\./etc' has the character '\.'"),
    ("lock-body-array", codes.LOCK_BATCH_MQ, None, b"[]", codes.SYSTEM_ERROR, r"lock body is not a JSON object"),
    ("lock-mqSet-object", codes.LOCK_BATCH_MQ, None, _json({"consumerGroup": "g", "mqSet": {"a": 1}}),
     codes.SYSTEM_ERROR, r"mqSet is not a list of objects"),
    ("unlock-queueId-string", codes.UNLOCK_BATCH_MQ, None,
     _json({"consumerGroup": "g", "clientId": "c", "mqSet": [{"topic": TOPIC, "queueId": "x"}]}), codes.SYSTEM_ERROR,
     r"mqSet\[0\]\.queueId is 'x', not an integer"),
    ("send-back-group-with-a-path", codes.CONSUMER_SEND_MSG_BACK, {"group": "../x", "offset": 0, "delayLevel": 1}, b"",
     codes.SYSTEM_ERROR, r"topic '%RETRY%\.\./x' has the character '\.'"),
    ("create-topic-queue-nums-string", codes.UPDATE_AND_CREATE_TOPIC, {"topic": "HostileNew", "readQueueNums": "many"},
     b"", codes.SYSTEM_ERROR, r"readQueueNums is 'many', not an integer"),
    ("unknown-code", 4242, {}, b"", codes.REQUEST_CODE_NOT_SUPPORTED, r"request type 4242 not supported"),
]


def test_wrong_field_types_are_answered_naming_the_field_on_a_connection_that_stays_open(env):
    log = BrokerLog(env.log_path)
    conn = RawConn(env.port)
    wrong = []
    try:
        for name, code, ext, body, want, remark in ANSWERED:
            r = conn.request(code, ext, body)  # the answer carries this request's opaque
            if r.code != want or not re.search(remark, r.remark or ""):
                wrong.append(f"{name}: got {r.code} {r.remark!r}, wanted {want} matching {remark!r}")
        assert not wrong, "\n".join(wrong)
        round_trip(conn)  # the same connection still works
    finally:
        conn.close()
    env.served()
    # refused means nothing registered or stored
    r = env.good.request(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "hostile-commit", "topic": TOPIC, "queueId": 0})
    assert r.ext.get("offset") in (None, "0"), r
    assert env.good.request(codes.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "hostile-codes"}).code == codes.SYSTEM_ERROR
    assert not {"HostileNew", "%RETRY%../x", "%RETRY%../../etc"} & env.topics()
    text = log.text()
    assert "Traceback" not in text and "internal error" not in text and " ERROR " not in text, text[-3000:]


def test_a_pull_for_a_topic_or_queue_that_does_not_exist_is_answered_without_log_spam(env):
    log = BrokerLog(env.log_path)
    maps = len(env.proc.memory_maps(grouped=False))
    r = env.good.request(codes.PULL_MESSAGE, {**_PULL, "topic": "NoSuchTopic"})
    assert r.code == codes.TOPIC_NOT_EXIST and "topic[NoSuchTopic] not exist" in r.remark
    # a long poll (sysFlag suspend) for it is not held either
    t = time.monotonic()
    r = env.good.request(codes.PULL_MESSAGE, {**_PULL, "topic": "NoSuchTopic", "sysFlag": 2, "suspendTimeoutMillis": 15000})
    assert r.code == codes.TOPIC_NOT_EXIST and time.monotonic() - t < 5
    for queue_id in (4, 99, -1, 2**31 - 1):
        r = env.good.request(codes.PULL_MESSAGE, {**_PULL, "queueId": queue_id})
        assert r.code == codes.SYSTEM_ERROR and f"queueId[{queue_id}] is illegal" in r.remark, (queue_id, r.remark)
    r = env.good.request(codes.GET_MAX_OFFSET, {"topic": "NoSuchTopic", "queueId": 0})
    assert (r.code, r.ext["offset"]) == (codes.SUCCESS, "0")
    # names that walk the store's directories ("Hostile/./../Hostile" is Hostile's queue directory)
    # are no queue: before, each one mapped that queue's files once more, for good
    for i in range(100):
        name = TOPIC + "/" + "./" * i + "../" + TOPIC
        r = env.good.request(codes.GET_MIN_OFFSET, {"topic": name, "queueId": 0})
        assert (r.code, r.ext["offset"]) == (codes.SUCCESS, "0")
        r = env.good.request(codes.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": name, "queueId": 0})
        assert r.code in (codes.SUCCESS, codes.QUERY_NOT_FOUND)
    assert len(env.proc.memory_maps(grouped=False)) - maps < 10
    env.served()
    text = log.text()
    assert "WARNING" not in text and "ERROR" not in text and "Traceback" not in text, text[-3000:]


def test_a_send_to_a_200_byte_topic_is_refused_nothing_is_stored_and_the_connection_is_kept(env):
    before = int(env.runtime()["commitLogMaxOffset"])
    conn = RawConn(env.port)
    try:
        for topic, remark in [("T" * 200, r"must be 1\.\.127 bytes"), ("T" * 128, r"must be 1\.\.127 bytes"),
                              ("a/b", r"has the character '/'"), ("../../etc", r"has the character '\.'"),
                              ("Tö", r"has the character 'ö'")]:
            r = send_message(conn, topic, b"must not be stored")
            assert r.code == codes.SYSTEM_ERROR and re.search(remark, r.remark), (topic, r.code, r.remark)
            r = conn.request(codes.SEND_MESSAGE_V2, {"a": "pg", "b": topic, "c": "TBW102", "d": 4, "e": 0, "i": ""}, b"x")
            assert r.code == codes.SYSTEM_ERROR and re.search(remark, r.remark), (topic, r.code, r.remark)
        assert int(env.runtime()["commitLogMaxOffset"]) == before
        names = env.topics()
        assert not any(len(n) > 127 or "/" in n or "." in n for n in names), names
        assert not (env.cluster.root / "store" / "consumequeue" / ("T" * 200)).exists()
        round_trip(conn)  # the same connection goes on; 127 bytes is a topic
        round_trip(conn, "T" * 127)
    finally:
        conn.close()


def test_a_client_sending_one_byte_a_second_holds_up_no_one(env):
    slow = RawConn(env.port)
    opaque = 10**9 + next(_seq)
    request = frame(header(codes.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0}, opaque))
    try:
        start = time.monotonic()
        for i in range(4):  # the length prefix, one byte a second
            slow.send(request[i:i + 1])
            t = time.monotonic()
            env.served()  # a send and its pull on the long-lived connection and on a new one
            assert time.monotonic() - t < 2.0, "the others waited on the slow client"
            time.sleep(max(0.0, start + i + 1 - time.monotonic()))  # the pace IS the behaviour under test
        assert slow.is_open()
        slow.send(request[4:])  # the rest at once: the slow client is answered like anyone
        r = slow.read()
        assert (r.code, r.opaque) == (codes.SUCCESS, opaque)
        assert r.ext["offset"] == env.good.request(codes.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0}).ext["offset"]
    finally:
        slow.close()


def test_a_thousand_idle_connections_cost_little_memory_and_the_broker_still_serves(env, record_property):
    def established() -> int:
        return sum(1 for c in env.proc.net_connections("tcp")
                   if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == env.port)

    n0 = established()
    rss = env.rss()
    idle = []
    try:
        for _ in range(1000):
            idle.append(RawConn(env.port))
        wait_until(lambda: established() >= n0 + 1000, 30, "the broker to accept 1,000 connections")
        env.served()
        grown = env.rss() - rss
        record_property("rss_before_mib", round(rss / MiB, 1))
        record_property("rss_with_1000_idle_mib", round((rss + grown) / MiB, 1))
        # each connection used to allocate a 1 MiB receive buffer when accepted: +1 GiB
        assert grown < 100 * MiB, f"1,000 idle connections grew the broker's RSS by {grown / MiB:.0f} MiB"
        assert all(c.is_open() for c in idle)
    finally:
        for c in idle:
            c.close()
    wait_until(lambda: established() <= n0, 30, "the broker to see the 1,000 connections closed")
    env.served()


def test_a_client_that_never_reads_its_answers_costs_bounded_memory(env, record_property):
    """Pipelined pulls of ~128 KiB answers, 20,000 of them (2.5 GiB of answers), never read: the
    broker stops reading that client's requests once WRITE_HIGH (8 MiB) of answers wait unsent."""
    for i in range(32):
        assert send_message(env.good, TOPIC, b"%04d" % i + b"z" * 4092, 1).code == codes.SUCCESS
    deaf = RawConn(env.port)
    deaf.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    deaf.sock.setblocking(False)
    rss, hwm = env.rss(), env.hwm()
    request = frame(header(codes.PULL_MESSAGE, {
        "consumerGroup": "deaf", "topic": TOPIC, "queueId": 1, "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0,
        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}))
    sent = 0
    try:
        deadline = time.monotonic() + 20
        while sent < 20000 * len(request) and time.monotonic() < deadline:
            try:
                sent += deaf.sock.send(request * 50)
            except BlockingIOError:  # the broker stopped reading us: what back-pressure is
                break
        env.served()  # everyone else is served meanwhile
        grown, peak = env.rss() - rss, env.hwm() - hwm
        record_property("deaf_client_requests_accepted", sent // len(request))
        record_property("deaf_client_rss_growth_mib", round(grown / MiB, 1))
        assert sent < 20000 * len(request), "the broker read every request of a client that never reads"
        assert peak < 64 * MiB, f"answers nobody reads grew the broker's peak RSS by {peak / MiB:.0f} MiB"
    finally:
        deaf.close()
    env.served()


def test_after_everything_the_broker_still_serves_and_its_memory_stayed_bounded(env, record_property):
    env.served()
    assert env.proc.is_running() and env.proc.status() != psutil.STATUS_ZOMBIE
    record_property("rss_module_start_mib", round(env.rss0 / MiB, 1))
    record_property("rss_module_end_mib", round(env.rss() / MiB, 1))
    record_property("peak_rss_growth_mib", round((env.hwm() - env.hwm0) / MiB, 1))
    assert env.rss() - env.rss0 < 100 * MiB
    assert env.hwm() - env.hwm0 < 150 * MiB  # the peak too: no transient 2 GiB (or 1 GiB) allocation
    text = env.log_path.read_text(errors="replace")
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]


def test_idle_connections_are_closed_after_server_channel_max_idle_time(tmp_path):
    """serverChannelMaxIdleTimeSeconds (NettyServerConfig; 120 s by default, 3 s here): no read and
    no write for that long closes the connection (RocketMQ's IdleStateHandler ALL_IDLE), a half-sent
    frame or not; a trickle of one byte a second keeps it open; new connections are served throughout."""
    with Cluster(tmp_path / "idle", "serverChannelMaxIdleTimeSeconds=3\n") as c:
        log = BrokerLog(c.root / "broker.err")
        request = frame(header(codes.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0}))
        idle, partial, trickle = RawConn(c.port), RawConn(c.port), RawConn(c.port)
        try:
            partial.send(request[:10])
            start = last = time.monotonic()
            for i in range(5):  # one byte a second: never 3 s without traffic
                if i:
                    assert trickle.is_open(), f"closed {time.monotonic() - last:.1f} s after its last byte"
                trickle.send(request[i:i + 1])
                last = time.monotonic()
                if i == 1:  # ~1 s in: nobody closed yet
                    assert idle.is_open() and partial.is_open()
                time.sleep(max(0.0, start + i + 1 - time.monotonic()))  # the pace IS the behaviour
            assert trickle.is_open()
            assert idle.closed_by_peer(10) and partial.closed_by_peer(10)
            assert c.call(codes.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0}).code == codes.SUCCESS
            assert trickle.closed_by_peer(15)  # it went quiet
            assert time.monotonic() - last >= 2.9
        finally:
            for conn in (idle, partial, trickle):
                conn.close()
        for conn in (idle, partial, trickle):
            log.wait(rf"WARNING closing connection from {re.escape(conn.peer)}: no traffic for \d+ s "
                     r"\(serverChannelMaxIdleTimeSeconds=3\)")
        assert c.call(codes.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": 0}).code == codes.SUCCESS


def test_server_channel_max_idle_time_is_validated():
    assert load_broker_config({})[0].serverChannelMaxIdleTimeSeconds == 120  # RocketMQ's default
    assert load_broker_config({"serverChannelMaxIdleTimeSeconds": "0"})[0].serverChannelMaxIdleTimeSeconds == 0
    for bad, why in (("-1", "must not be negative"), ("2m", "is not an integer")):
        with pytest.raises(StoreConfigError, match=f"serverChannelMaxIdleTimeSeconds.*{why}"):
            load_broker_config({"serverChannelMaxIdleTimeSeconds": bad})
