"""encode_popped (broker.kernels.receive_reply), the ReceiveMessage answer written from a
POP_MESSAGE body's records themselves, against its twin and against the front's own path
(hypothesis): for random pop answers (records of the topic and of its pop retry topics on several
queues, every property the answer reads, user properties with a key twice, properties that are
not UTF-8, POP_CK stored, no UNIQ_KEY, digits past ASCII, compressed bodies, IPv6 hosts,
timestamps past protobuf's range, reconsume counts at int32's end, start offsets missing or
large), the kernel equals the twin, declines included; and where it answers, its bytes and
handles are what broker.client.pop.read_records and receive_reply.receive_ok give for the same
answer, byte for byte. Then ConsumerActivity.receive_message through a stubbed pop: the kernel's
answer in one piece with its handles renewed, and a record it declines answered by the old path."""
from __future__ import annotations

import asyncio
import socket
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.client import pop as pop_api
from broker.common import extra_info as ei
from broker.kernels import receive_reply as K
from broker.proxy import receive_reply
from broker.proxy.converter import SYSTEM_PROPERTIES
from broker.proxy.protocol import service_pb2 as spb
from tests.twins import codec_twin as C
from tests.twins import receive_reply_twin as T

SETTINGS = settings(database=None, deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
V4 = socket.inet_aton("10.0.0.7") + (10911).to_bytes(4, "big")
V4B = socket.inet_aton("192.168.200.1") + (40001).to_bytes(4, "big")
V4P = socket.inet_aton("10.0.0.7") + (10912).to_bytes(4, "big")  # V4's address, another port
V6 = socket.inet_pton(socket.AF_INET6, "fe80::1") + (40000).to_bytes(4, "big")
MS_MAX = 253402300799999  # protobuf Timestamp's last millisecond
TOPIC, GROUP = "TopicA", "g1"
TOPICS = [TOPIC, ei.pop_retry_topic(TOPIC, GROUP), f"%RETRY%{GROUP}+{TOPIC}"]

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"), max_size=10)
ms = st.one_of(st.integers(0, 2**41), st.sampled_from([0, MS_MAX, MS_MAX + 1, 2**62]))
digits = st.one_of(ms.map(str), st.sampled_from(["", "12a", "\u00b2", "\u0663", " 5", "1" * 19, "0" * 18 + "7"]))
plain_ms = st.one_of(st.integers(0, 2**41), st.sampled_from([0, MS_MAX]))
plain_digits = st.one_of(st.integers(0, 2**41).map(str), st.sampled_from(["", "12a", " 5", "0" * 18]))
value = {
    "UNIQ_KEY": text.filter(bool), "TAGS": text,
    "KEYS": st.lists(st.sampled_from(["k1", "", "k 2", "\u00e9"]), max_size=4).map(" ".join),
    "BORN_TIMESTAMP": digits, "__BORNHOST": st.sampled_from(["", "1.2.3.4", "::1"]), "__SHARDINGKEY": text,
    "TRAN_MSG": st.sampled_from(["true", "false", ""]), "TIMER_DELIVER_MS": digits, "TRACE_CONTEXT": text,
    "1ST_POP_TIME": st.just("1"), "WAIT": st.just("true"),
}


@st.composite
def raw_properties(draw, plain: bool) -> bytes:
    """`plain`: nothing encode_popped declines (but a timestamp may still be out of range)."""
    pairs = []
    if plain or draw(st.integers(0, 9)):  # mostly with a UNIQ_KEY (what every producer sets)
        pairs.append(("UNIQ_KEY", draw(value["UNIQ_KEY"])))
    for key in draw(st.lists(st.sampled_from(sorted(value)), max_size=5)):  # a key may come twice
        pairs.append((key, draw(plain_digits if plain and key in ("BORN_TIMESTAMP", "TIMER_DELIVER_MS")
                                else value[key])))
    users = st.sampled_from(["a", "b", "c\u00e9"])
    for key, v in draw(st.lists(st.tuples(users, text), max_size=3, unique_by=(lambda kv: kv[0]) if plain else None)):
        pairs.append((key, v))
    if not plain and draw(st.integers(0, 15)) == 0:
        pairs.append(("POP_CK", "0 1 30000 0 0 b 1 0"))
    draw(st.randoms()).shuffle(pairs)
    raw = "\x02".join(f"{k}\x01{v}" for k, v in pairs).encode()
    if not plain and draw(st.integers(0, 15)) == 0:
        raw += b"\x02bad\x01\xff\xfe"  # not UTF-8
    if draw(st.integers(0, 7)) == 0:
        raw += draw(st.sampled_from([b"\x02", b"\x02novalue\x01", b"\x02\x01nokey", b"\x02justtext"]))
    return raw


@st.composite
def record(draw, offset: int, plain: bool) -> bytes:
    raw = draw(raw_properties(plain))
    body = draw(st.one_of(st.binary(max_size=60), st.binary(min_size=50, max_size=300)))
    sys_flag = 0 if plain else draw(st.sampled_from([0, 0, 0, 0, 0x10, 0x20]))
    if not plain and body and draw(st.integers(0, 7)) == 0:
        body, sys_flag = zlib.compress(body), sys_flag | 1
    # hosts repeated and changed between a pop's records (the kernel keeps the last host's text)
    born = V6 if sys_flag & 0x10 else draw(st.sampled_from([V4, V4B, V4P]))
    store = V6 if sys_flag & 0x20 else draw(st.sampled_from([V4, V4, V4B, V4P]))
    topic = draw(st.sampled_from(TOPICS)).encode()
    buf = bytearray(C.record_length(len(body), len(topic), len(raw), born == V6, store == V6))
    stamp = plain_ms if plain else ms
    n = C.encode_record(buf, 0, draw(st.integers(0, 2**40)), offset, draw(stamp), topic, draw(st.integers(0, 3)),
                        body, raw, 0, sys_flag, draw(stamp), born, store,
                        draw(st.sampled_from([0, 1, 15, 2**31 - 2] + ([] if plain else [2**31 - 1]))), 0)
    return bytes(buf[:n])


@st.composite
def pop_answer(draw) -> pop_api.PoppedRecords:
    plain = draw(st.booleans())  # half the answers hold nothing the kernel declines (mostly)
    records = [draw(record(100 + i, plain)) for i in range(draw(st.integers(1, 12)))]  # over eight: MD5 lanes
    starts = [f"{f} {q} {draw(st.sampled_from([0, 7, 100, 2**62]))}" for f in "012" for q in range(4)
              if plain or draw(st.integers(0, 19))]  # now and then a queue's start offset is missing
    return pop_api.PoppedRecords(pop_api.FOUND, b"".join(records), pop_time=draw(st.integers(0, 2**41)),
                                 invisible_time=draw(st.integers(0, 10**7)), revive_qid=draw(st.integers(0, 8)),
                                 start_offset_info=";".join(starts))


def old_path(popped: pop_api.PoppedRecords, invisible_ms: int, now_ms: int):
    """What the front answered from the same pop answer before encode_popped (ValueError: it failed)."""
    try:
        r = pop_api.read_records(popped, "broker-a", TOPIC)
    except Exception as e:  # noqa: BLE001 - the receive's status then, not an answer
        return ("error", type(e).__name__)
    handles = [f"{pop_api.handle_of(m)} {m.commit_log_offset}" for m in r.messages]
    try:
        return ("ok", bytes(receive_reply.receive_ok(r.messages, TOPIC, handles, invisible_ms, now_ms)), handles)
    except ValueError:
        return ("ValueError",)


invisible = st.one_of(st.integers(10_000, 12 * 3600 * 1000), st.sampled_from([0, 1, 999, 60_000]))
now = st.one_of(st.integers(0, 2**42), st.just(MS_MAX + 1))


def middle(p: pop_api.PoppedRecords) -> str:
    return f"{p.pop_time} {p.invisible_time} {p.revive_qid}"


@SETTINGS
@given(pop_answer(), invisible, now, st.booleans())
def test_the_kernel_equals_the_twin_and_answers_as_the_front_did(popped, invisible_ms, now_ms, want_handles):
    starts = ei.parse_start_offset_info(popped.start_offset_info)
    k = K.encode_popped(popped.body, TOPIC, starts, middle(popped), "broker-a", invisible_ms, SYSTEM_PROPERTIES,
                        now_ms, want_handles)
    assert k == T.encode_popped(popped.body, TOPIC, starts, middle(popped), "broker-a", invisible_ms,
                                SYSTEM_PROPERTIES, now_ms, want_handles)
    if k is None:
        return
    data, handles = k
    old = old_path(popped, invisible_ms, now_ms)
    assert old[0] == "ok" and data == old[1]
    assert handles == (old[2] if want_handles else None)
    fast = receive_reply.receive_popped(popped, TOPIC, "broker-a", invisible_ms, now_ms, True)
    assert bytes(fast[0]) == old[1] and fast[1] == old[2]


def test_a_usual_pop_is_not_declined():
    """Records as a producer stores them (UNIQ_KEY, TAGS, KEYS, a user property; IPv4 hosts) of the
    topic and its retry topic on two queues: the kernel answers them."""
    def rec(topic: str, qid: int, qo: int) -> bytes:
        raw = f"UNIQ_KEY\x01U{qo}\x02TAGS\x01t\x02KEYS\x01k1 k2\x02WAIT\x01true\x02color\x01red".encode()
        buf = bytearray(C.record_length(4, len(topic), len(raw)))
        n = C.encode_record(buf, 0, 5000 + qo, qo, 1_700_000_000_001, topic.encode(), qid, b"body", raw, 0, 0,
                            1_700_000_000_000, V4, V4, 0, 0)
        return bytes(buf[:n])
    body = b"".join([rec(TOPIC, 1, 10), rec(TOPIC, 1, 11), rec(TOPICS[1], 0, 3), rec(TOPIC, 2, 7)])
    popped = pop_api.PoppedRecords(pop_api.FOUND, body, pop_time=1_700_000_000_500, invisible_time=30_000,
                                   revive_qid=2, start_offset_info="0 1 10;1 0 3;0 2 5")
    fast = receive_reply.receive_popped(popped, TOPIC, "broker-a", 30_000, 1_700_000_000_600, True)
    assert fast is not None
    old = old_path(popped, 30_000, 1_700_000_000_600)
    assert bytes(fast[0]) == old[1]
    assert fast[1] == ["10 1700000000500 30000 2 0 broker-a 1 10 5010", "10 1700000000500 30000 2 0 broker-a 1 11 5011",
                       "3 1700000000500 30000 2 1 broker-a 0 3 5003", "5 1700000000500 30000 2 0 broker-a 2 7 5007"]
    data = bytes(fast[0])  # Status OK's frame is 15 bytes; the first message's follows
    first = spb.ReceiveMessageResponse.FromString(data[20:20 + int.from_bytes(data[16:20], "big")])
    assert first.message.user_properties == {"color": "red"}
    assert list(first.message.system_properties.keys) == ["k1", "k2"]


def _receive(popped: pop_api.PoppedRecords, monkeypatch):
    """ConsumerActivity.receive_message of a PushConsumer (auto_renew) for a pop that answered `popped`."""
    from broker.proxy.config import ProxyConfig
    from broker.proxy.consumer_activity import ConsumerActivity
    from broker.proxy.protocol import definition_pb2 as pb

    async def fake_pop_records(*args, **kwargs):
        return popped

    class Groups:
        async def get(self, addr, group):
            return {}

    async def addr(topic, broker):
        return "127.0.0.1:1"

    monkeypatch.setattr(pop_api, "pop_records", fake_pop_records)
    activity = ConsumerActivity.__new__(ConsumerActivity)
    activity.client, activity.config, activity.groups, activity._broker_addr = None, ProxyConfig(), Groups(), addr
    activity.renewals = type("R", (), {"added": [], "add": lambda self, *a: self.added.append(a)})()
    request = spb.ReceiveMessageRequest(group=pb.Resource(name=GROUP), batch_size=32, auto_renew=True,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC),
                                                                      broker=pb.Broker(name="broker-a")))
    context = type("C", (), {"invocation_metadata": lambda self: (("x-mq-client-id", "c1"),)})()

    async def run():
        return [bytes(piece) async for piece in activity.receive_message(request, context)]
    return asyncio.run(run()), [a[3] for a in activity.renewals.added]


def _frames(data: bytes) -> list[bytes]:
    """The gRPC messages of a stream's bytes."""
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos + 1:pos + 5], "big")
        out.append(data[pos + 5:pos + 5 + n])
        pos += 5 + n
    return out


def _one(topic: str, qo: int, sys_flag: int = 0) -> bytes:
    raw = f"UNIQ_KEY\x01U{qo}".encode()
    body = zlib.compress(b"hello") if sys_flag & 1 else b"hello"
    buf = bytearray(C.record_length(len(body), len(topic), len(raw)))
    n = C.encode_record(buf, 0, 900 + qo, qo, 1_700_000_000_001, topic.encode(), 0, body, raw, 0, sys_flag,
                        1_700_000_000_000, V4, V4, 0, 0)
    return bytes(buf[:n])


def test_receive_message_answers_the_kernel_s_bytes_and_renews_its_handles(monkeypatch):
    popped = pop_api.PoppedRecords(pop_api.FOUND, _one(TOPIC, 4) + _one(TOPIC, 5), pop_time=1, invisible_time=60_000,
                                   revive_qid=0, start_offset_info="0 0 4")
    pieces, renewed = _receive(popped, monkeypatch)
    assert len(pieces) == 1  # the whole answer in one piece
    assert renewed == ["4 1 60000 0 0 broker-a 0 4 904", "4 1 60000 0 0 broker-a 0 5 905"]
    old = old_path(popped, 60_000, 0)
    assert _frames(pieces[0])[:-1] == _frames(old[1])[:-1]  # all but the delivery timestamp (the clock's)


def test_receive_message_answers_a_declined_pop_as_before(monkeypatch):
    """A compressed body: encode_popped leaves it to read_records, and the answer is the old one."""
    popped = pop_api.PoppedRecords(pop_api.FOUND, _one(TOPIC, 4) + _one(TOPIC, 5, sys_flag=1), pop_time=1,
                                   invisible_time=60_000, revive_qid=0, start_offset_info="0 0 4")
    assert receive_reply.receive_popped(popped, TOPIC, "broker-a", 60_000, 0, False) is None
    pieces, renewed = _receive(popped, monkeypatch)
    assert len(pieces) == 1
    assert renewed == ["4 1 60000 0 0 broker-a 0 4 904", "4 1 60000 0 0 broker-a 0 5 905"]
    msgs = [spb.ReceiveMessageResponse.FromString(f) for f in _frames(pieces[0])]
    assert [m.message.body for m in msgs[1:3]] == [b"hello", b"hello"]  # the compressed one inflated


@settings(database=None, deadline=None, max_examples=500)
@given(st.one_of(st.text(max_size=8), st.text(alphabet="ab%|-_9\u00e9\u0663\n", min_size=250, max_size=260)))
def test_a_group_name_is_checked_character_by_character(name):
    """_group's one regex keeps the rule it replaced: 1 to 255 characters, each an ASCII letter or
    digit or one of '%', '|', '-', '_' (ILLEGAL_CONSUMER_GROUP otherwise)."""
    from broker.proxy.consumer_activity import _group
    from broker.proxy.protocol import definition_pb2 as pb
    from broker.proxy.status import ProxyError
    ok = 0 < len(name) <= 255 and all(c.isascii() and (c.isalnum() or c in "%|-_") for c in name)
    if ok:
        assert _group(pb.Resource(name=name)) == name
    else:
        with pytest.raises(ProxyError):
            _group(pb.Resource(name=name))


def _digests_answered(n: int, lengths: list[int], step: int):
    """A pop of `n` records whose bodies take `lengths` in turn, encoded by the kernel: equal to
    the twin's answer, each message's body digest hashlib's. (the pop's bytes, the kernel's answer)"""
    import hashlib

    records, digests = [], []
    for i in range(n):
        body = bytes((step * i + j) & 0xFF for j in range(lengths[(i + n) % len(lengths)]))
        raw = f"UNIQ_KEY\x01U{i}".encode()
        buf = bytearray(C.record_length(len(body), len(TOPIC), len(raw)))
        size = C.encode_record(buf, 0, 10 * i, i, 1_700_000_000_001, TOPIC.encode(), 0, body, raw, 0, 0,
                               1_700_000_000_000, V4, V4, 0, 0)
        records.append(bytes(buf[:size]))
        digests.append(hashlib.md5(body).hexdigest().upper())
    body = b"".join(records)
    k = K.encode_popped(body, TOPIC, {"0@0": 0}, "1 2 3", "broker-a", 30_000, SYSTEM_PROPERTIES, 5, False)
    assert k == T.encode_popped(body, TOPIC, {"0@0": 0}, "1 2 3", "broker-a", 30_000, SYSTEM_PROPERTIES, 5, False)
    got = [spb.ReceiveMessageResponse.FromString(f).message.system_properties.body_digest.checksum
           for f in _frames(k[0])[1:-1]]
    assert got == digests
    return body, k


def test_the_bodies_md5_eight_at_a_time_at_every_block_edge():
    """encode_popped's MD5s, made eight bodies at once (md5_mb.h), against hashlib's (the twin's) for
    bodies of every length around the 64-byte block and the 56-byte padding edges, in pops of 1 to
    19 records (lanes left empty, and a second round of eight)."""
    lengths = [0, 1, 54, 55, 56, 57, 63, 64, 65, 119, 120, 121, 127, 128, 129, 1000, 1024, 4097, 3]
    for n in range(1, len(lengths) + 1):
        body, k = _digests_answered(n, lengths, 7)
        # the same answer where the CPU has no AVX2: each body through OpenSSL
        before = K.use_md5_lanes(False)
        try:
            assert K.encode_popped(body, TOPIC, {"0@0": 0}, "1 2 3", "broker-a", 30_000, SYSTEM_PROPERTIES, 5,
                                   False) == k
        finally:
            K.use_md5_lanes(before)


EDGES = [0, 55, 56, 63, 64, 65, 119, 120, 1024, 4000]


def test_md5_digests_in_two_groups_of_lanes_at_every_block_edge():
    """md5_many (sixteen bodies a pass, two groups of eight AVX2 lanes; eight or fewer in one group)
    against hashlib for 1 to 40 bodies: every body of one length around the block and padding
    edges, and the lengths mixed (lanes of one pass ending at different blocks), so both groups,
    a pass's empty lanes and the passes' tails are covered; and OpenSSL's per-body fallback."""
    import hashlib
    import random

    rnd = random.Random(5)
    for n in range(1, 41):
        cases = [[rnd.randbytes(size) for _ in range(n)] for size in EDGES]
        cases.append([rnd.randbytes(rnd.choice(EDGES)) for _ in range(n)])
        cases.append([rnd.randbytes(EDGES[(i * 7 + n) % len(EDGES)]) for i in range(n)])
        for bodies in cases:
            want = b"".join(hashlib.md5(b).digest() for b in bodies)
            assert K.md5_digests(bodies) == want, (n, [len(b) for b in bodies])
            assert K.md5_digests(bodies, False) == want
    assert K.md5_digests([]) == b""
    two = K.md5_digests([memoryview(b"abc"), bytearray(b"")])
    assert two == hashlib.md5(b"abc").digest() + hashlib.md5().digest()
    with pytest.raises(TypeError):
        K.md5_digests(["text"])


def test_the_answers_md5_in_pops_of_1_to_40_records():
    """encode_popped's body digests (md5_many's two groups and their tails) against hashlib's and
    the twin's, in pops of 1 to 40 records of lengths around the block edges."""
    for n in range(1, 41):
        _digests_answered(n, EDGES, 11)


def test_pops_of_up_to_and_past_the_stack_arrays():
    """encode_popped keeps a pop's record spans and MD5 inputs on the stack up to 64 records and
    allocates them past that: pops of 63, 64, 65 and 130 records (random bodies of lengths around
    the block edges, two queues) answer as the twin and hashlib, handles included."""
    import hashlib
    import random

    rnd = random.Random(32)
    for n in (63, 64, 65, 130):
        records, digests = [], []
        for i in range(n):
            body = rnd.randbytes(rnd.choice([0, 55, 56, 64, 120, 1024, rnd.randrange(2000)]))
            raw = f"UNIQ_KEY\x01U{i}\x02TAGS\x01t{i % 3}\x02k{i % 5}\x01v".encode()
            buf = bytearray(C.record_length(len(body), len(TOPIC), len(raw)))
            size = C.encode_record(buf, 0, 10 * i, i, 1_700_000_000_001, TOPIC.encode(), i % 2, body, raw, 0, 0,
                                   1_700_000_000_000, V4, V4B, i % 4, 0)
            records.append(bytes(buf[:size]))
            digests.append(hashlib.md5(body).hexdigest().upper())
        body = b"".join(records)
        starts = {"0@0": 3, "0@1": 2**40}
        k = K.encode_popped(body, TOPIC, starts, "1 2 3", "broker-a", 30_000, SYSTEM_PROPERTIES, 5, True)
        assert k is not None
        assert k == T.encode_popped(body, TOPIC, starts, "1 2 3", "broker-a", 30_000, SYSTEM_PROPERTIES, 5, True)
        got = [spb.ReceiveMessageResponse.FromString(f).message.system_properties.body_digest.checksum
               for f in _frames(k[0])[1:-1]]
        assert got == digests and len(k[1]) == n
