"""Transactional messages (RocketMQ 4.x): half messages invisible until END_TRANSACTION commits
them, rolled back ones never delivered, undecided ones checked with a producer of their group
(the project's TransactionProducer answers), checked at most transactionCheckMax times, and all
of it across a producer's and a broker's kill -9. Real name servers and brokers on loopback; the
intervals are short through the broker.conf keys."""
from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter

import pytest

from broker.client.message import Message
from broker.client.producer import SEND_OK
from broker.client.pull_consumer import PullConsumer
from broker.client.transaction_producer import LocalTransactionState, TransactionProducer, offset_of
from broker.remoting import codes
from broker.server.broker_config import load_broker_config
from broker.server.transaction import HALF_TOPIC, OP_TOPIC
from broker.store.errors import StoreConfigError
from tests.conftest import wait_for
from tests.helpers.procs import Child
from tests.helpers.procs import async_wait_until as until
from tests.helpers.real_clients import Cluster as ProcessCluster
from tests.helpers.real_clients import produce
from tests.test_broker_remoting import Broker, _records
from tests.test_client import Cluster

COMMIT, ROLLBACK, UNKNOW = (LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.ROLLBACK_MESSAGE,
                            LocalTransactionState.UNKNOW)
# checked within a second of being sent (RocketMQ: 6 s and then every 60 s)
TX = {"transactionCheckInterval": 200, "transactionTimeOut": 400}
TX_CONF = "".join(f"{k}={v}\n" for k, v in TX.items())


class Listener:
    """execute_local_transaction answers `arg`; check_local_transaction answers `on_check(body)`
    (None: the test did not expect a check). Both record what they were asked about."""

    def __init__(self, on_check=None):
        self.on_check = on_check
        self.executed: list[bytes] = []
        self.checked: list[bytes] = []
        self.during: list[Counter] = []  # what consumers could read while a transaction ran
        self.look = None  # async () -> Counter, called inside execute_local_transaction

    async def execute_local_transaction(self, msg, arg):
        self.executed.append(msg.body)
        if self.look is not None:
            self.during.append(await self.look())
        return arg

    def check_local_transaction(self, msg):
        self.checked.append(bytes(msg.body))
        assert self.on_check is not None, f"unexpected check of {msg.body!r}"
        return self.on_check(bytes(msg.body))


async def delivered(pc: PullConsumer, topic: str) -> Counter:
    """Every body a consumer of `topic` can read, from offset 0 of each queue."""
    out: Counter = Counter()
    for mq in await pc.fetch_queues(topic):
        offset = 0
        while True:
            r = await pc.pull(mq, offset)
            if r.status != "FOUND":
                break
            out.update(bytes(m.body) for m in r.messages)
            offset = r.next_begin_offset
    return out


async def until_delivered(pc: PullConsumer, topic: str, want: Counter, timeout: float = 30) -> Counter:
    """Pull until `want` was delivered (a bounded wait: the check service runs on its interval)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await delivered(pc, topic)
        if all(got[b] >= n for b, n in want.items()):
            return got
        assert time.monotonic() < deadline, f"delivered {dict(got)}, want {dict(want)}"
        await asyncio.sleep(0.05)


def stored(broker, topic: str) -> list:
    """The records of one queue-0 system topic as the in-process store holds them."""
    r = broker.store.get(topic, 0, 0, max_msgs=1000)
    try:
        return [_records(bytes(v))[0] for v in r.messages]
    finally:
        r.release()


def test_commit_delivers_once_and_rollback_never_and_neither_is_visible_before(tmp_path):
    async def go():
        async with Cluster(tmp_path, **TX) as c:
            await c.create_topic("TX1")
            listener = Listener()
            async with TransactionProducer("txg", listener, c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                listener.look = lambda: delivered(pc, "TX1")
                r = await p.send_message_in_transaction(Message("TX1", b"commit-me", tags="T"), COMMIT)
                assert r.status == SEND_OK and r.local_transaction_state == COMMIT
                assert r.transaction_id == r.send_result.msg_id
                r2 = await p.send_message_in_transaction(Message("TX1", b"roll-me-back"), ROLLBACK)
                assert r2.local_transaction_state == ROLLBACK
                # while each local transaction ran its half message was stored, and no consumer saw it
                assert listener.during[0] == Counter() and b"roll-me-back" not in listener.during[1]
                got = await until_delivered(pc, "TX1", Counter({b"commit-me": 1}))
                halves = stored(c.broker, HALF_TOPIC)
                assert [h.body for h in halves] == [b"commit-me", b"roll-me-back"]
                assert all(h.properties["REAL_TOPIC"] == "TX1" and h.properties["PGROUP"] == "txg"
                           and h.properties["TRAN_MSG"] == "true" and h.sys_flag & 0xC == 0 for h in halves)
                assert [h.properties["REAL_QID"] for h in halves] == [str(x.send_result.queue.queue_id)
                                                                      for x in (r, r2)]
                # each transaction ended with an op naming its half message's queue offset
                await until(lambda: sorted(int(o.body) for o in stored(c.broker, OP_TOPIC)) == [0, 1],
                            what="two ops")
                assert {o.tags for o in stored(c.broker, OP_TOPIC)} == {"d"}
                # the committed message in its real queue: the COMMIT type, the transaction properties gone
                [mq] = [q for q in await pc.fetch_queues("TX1") if q.queue_id == r.send_result.queue.queue_id]
                [m] = (await pc.pull(mq, r.send_result.queue_offset)).messages
                assert m.sys_flag & 0xC == 0x8 and m.tags == "T" and m.uniq_key == r.send_result.msg_id
                assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & set(m.properties)
                # checks come only for undecided ones: after a few check intervals nothing changed
                check = c.broker.transaction_check
                await until(lambda: c.broker.store.consumer_offsets.query("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 2,
                            what="the check service to pass both")
                assert check.checks_sent == 0 and listener.checked == []
                assert got == Counter({b"commit-me": 1}) == await delivered(pc, "TX1")

    asyncio.run(go())


@pytest.mark.parametrize("outcome", [COMMIT, ROLLBACK])
def test_unknown_is_checked_and_the_check_decides(tmp_path, outcome):
    async def go():
        async with Cluster(tmp_path, **TX) as c:
            await c.create_topic("TX2")
            listener = Listener(on_check=lambda body: outcome)
            async with TransactionProducer("txg", listener, c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                r = await p.send_message_in_transaction(Message("TX2", b"undecided"), UNKNOW)
                assert r.local_transaction_state == UNKNOW
                await until(lambda: listener.checked, 10, "the broker's check")
                assert listener.checked == [b"undecided"]
                if outcome == COMMIT:
                    assert await until_delivered(pc, "TX2", Counter({b"undecided": 1})) == Counter({b"undecided": 1})
                # the check asked about a renewed copy; the answer named it: ops for the copy and the original
                await until(lambda: sorted(int(o.body) for o in stored(c.broker, OP_TOPIC)) == [0, 1], what="ops")
                half_offset = c.broker.store.consumer_offsets.query
                await until(lambda: half_offset("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) == 2, what="the check offset")
                # the producer's own late commit of the original is a duplicate: refused, nothing stored
                late = await _end(c.broker.addr, r, COMMIT)
                assert late.code == codes.SYSTEM_ERROR and "committed or rolled back" in late.remark
                # no further check once decided
                assert listener.checked == [b"undecided"] and c.broker.transaction_check.checks_sent == 1
                want = Counter({b"undecided": 1}) if outcome == COMMIT else Counter()
                assert await delivered(pc, "TX2") == want

    asyncio.run(go())


async def _end(addr: str, r, state, **over):
    """A producer's END_TRANSACTION for the half message of `r` as a request with an answer."""
    from broker.remoting.command import RemotingCommand
    from broker.remoting.connection import connect
    host, _, port = addr.rpartition(":")
    conn = await connect(host, int(port))
    try:
        ext = {"producerGroup": "txg", "tranStateTableOffset": str(r.send_result.queue_offset),
               "commitLogOffset": str(offset_of(r.send_result.offset_msg_id)),
               "commitOrRollback": {COMMIT: "8", ROLLBACK: "12", UNKNOW: "0"}[state],
               "fromTransactionCheck": "false", "msgId": r.send_result.msg_id, **over}
        return await conn.request(RemotingCommand.request(codes.END_TRANSACTION, ext), 5)
    finally:
        conn.close()


def test_a_check_and_the_producer_both_committing_store_the_message_once(tmp_path):
    """The producer's commit arrives after the check service asked (and the check's answer came
    first): whichever END_TRANSACTION is second stores nothing, the message is delivered once."""
    async def go():
        async with Cluster(tmp_path, **TX) as c:
            await c.create_topic("TX3")
            listener = Listener(on_check=lambda body: COMMIT)
            async with TransactionProducer("txg", listener, c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                r = await p.send_message_in_transaction(Message("TX3", b"both"), UNKNOW)
                await until(lambda: listener.checked, 10, "the check")
                await until_delivered(pc, "TX3", Counter({b"both": 1}))
                assert (await _end(c.broker.addr, r, COMMIT)).code == codes.SYSTEM_ERROR
                assert (await _end(c.broker.addr, r, ROLLBACK)).code == codes.SYSTEM_ERROR
                # and the other order: the producer first, then an answer to the check
                r2 = await p.send_message_in_transaction(Message("TX3", b"producer-first"), UNKNOW)
                listener.on_check = lambda body: COMMIT
                await until(lambda: b"producer-first" in listener.checked, 10, "the second check")
                # the check's answer is in flight or done; the producer's own commit is refused or
                # is first: in both cases one copy reaches consumers
                await _end(c.broker.addr, r2, COMMIT)
                got = await until_delivered(pc, "TX3", Counter({b"producer-first": 1}))
                n = c.broker.transaction_check.checks_sent
                await until(lambda: c.broker.transaction_check.checks_sent == n and
                            c.broker.store.consumer_offsets.query("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) >= 4,
                            what="the check offset past both copies")
                assert got == await delivered(pc, "TX3") == Counter({b"both": 1, b"producer-first": 1})

    asyncio.run(go())


def test_producer_killed_mid_transaction_a_new_producer_of_the_group_answers(tmp_path):
    async def go():
        async with Cluster(tmp_path, **TX) as c:
            await c.create_topic("TX4")
            opt = {"group": "txg", "namesrv": c.namesrv, "topic": "TX4", "count": 3, "prefix": "killed"}
            child = Child([sys.executable, "-m", "tests.helpers.transaction_child", json.dumps(opt)],
                          tmp_path / "child.err")
            try:
                await asyncio.get_running_loop().run_in_executor(None, lambda: child.wait_lines(
                    lambda ls: sum(ln.startswith("executing") for ln in ls) == 3, 30, "three local transactions"))
            finally:
                await asyncio.get_running_loop().run_in_executor(None, child.kill_group)
            assert child.proc.returncode == -signal.SIGKILL
            listener = Listener(on_check=lambda body: COMMIT if body != b"killed-1" else ROLLBACK)
            async with TransactionProducer("txg", listener, c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                await until(lambda: len(listener.checked) >= 3, 15, "checks of the three half messages")
                want = Counter({b"killed-0": 1, b"killed-2": 1})
                await until_delivered(pc, "TX4", want)
                half_offset = c.broker.store.consumer_offsets.query
                await until(lambda: half_offset("CID_RMQ_SYS_TRANS", HALF_TOPIC, 0) >= 6, what="the check offset")
                assert sorted(listener.checked) == [b"killed-0", b"killed-1", b"killed-2"]
                assert await delivered(pc, "TX4") == want
            assert listener.executed == []  # it only answered checks

    asyncio.run(go())


def test_undecided_half_messages_are_checked_transaction_check_max_times_then_discarded(tmp_path):
    """ali-ons sends half messages (TRAN_MSG) and never ends them: the broker asks (no producer of
    the group answers: ali-ons' has closed), renews each transactionCheckMax times, then discards
    it with a log line; no consumer ever gets one."""
    with ProcessCluster(tmp_path, TX_CONF + "transactionCheckMax=2\n") as c:
        c.create_topic("TXONS", 4)
        msgs = [{"tags": "T", "keys": [f"k{i}"], "props": {"TRAN_MSG": "true"}, "body": f"half-{i}"} for i in range(3)]
        results = produce("ons", c, "TXONS", msgs, tmp_path / "ons")
        assert [r.get("status") for r in results] == ["SEND_OK"] * 3, results
        log_path = tmp_path / "broker.err"
        wait_for(lambda: log_path.read_text().count("(transactionCheckMax): discarded") == 3, 30, "three discards")
        halves = c.records(HALF_TOPIC, 0)
        # each: the original, then a copy per check (TRANSACTION_CHECK_TIMES 1 and 2)
        per_body = Counter((h.body, h.properties.get("TRANSACTION_CHECK_TIMES")) for h in halves)
        assert per_body == Counter({(f"half-{i}".encode(), t): 1 for i in range(3) for t in (None, "1", "2")})
        assert all(h.sys_flag & 0xC == 0 and h.properties["REAL_TOPIC"] == "TXONS" for h in halves)
        assert c.total("TXONS") == 0
        assert c.max_offset(OP_TOPIC, 0) == 0  # nothing was ended


def test_broker_kill_9_with_undecided_half_messages_checks_them_after_restart_delivering_each_once(tmp_path):
    n = 6
    with ProcessCluster(tmp_path, "transactionCheckInterval=200\ntransactionTimeOut=60000\n") as c:
        c.create_topic("TXK", 4)

        async def before():
            async with TransactionProducer("txg", Listener(), c.namesrv) as p:
                await p.send_message_in_transaction(Message("TXK", b"committed-before"), COMMIT)
                await p.send_message_in_transaction(Message("TXK", b"rolled-back-before"), ROLLBACK)
                for i in range(n):
                    await p.send_message_in_transaction(Message("TXK", f"pending-{i}".encode()), UNKNOW)
        asyncio.run(before())
        wait_for(lambda: c.max_offset(OP_TOPIC, 0) == 2 and c.dispatched_all(), 10, "the ops")
        c.procs[1].kill_group()  # kill -9 the broker and its services
    # restarted on the same store, now with a short transactionTimeOut: the pending ones are due
    with ProcessCluster(tmp_path, TX_CONF) as c2:
        want = Counter({b"committed-before": 1, **{f"pending-{i}".encode(): 1 for i in range(n)}})

        async def after():
            listener = Listener(on_check=lambda body: COMMIT)
            async with TransactionProducer("txg", listener, c2.namesrv, topics=("TXK",)), \
                    PullConsumer("cg", c2.namesrv) as pc:
                await until_delivered(pc, "TXK", want)
            # each pending one was asked about (a slow answer may be asked about twice: deduped)
            assert set(listener.checked) == {f"pending-{i}".encode() for i in range(n)}
        asyncio.run(after())
        # every transaction ended (two ops per checked one: the copy's and the original's) ...
        wait_for(lambda: c2.max_offset(OP_TOPIC, 0) == 2 + 2 * n and c2.dispatched_all(), 10, "the ops of the commits")
        # ... and each message is in its topic once: the rolled back one never
        assert Counter(m.body for q in range(4) for m in c2.records("TXK", q)) == want


def test_end_transaction_bad_input_is_answered_with_an_error_and_stores_nothing(tmp_path):
    async def go():
        async with Broker(tmp_path, broker_kw=TX) as b:
            props = "TAGS\x01A\x02TRAN_MSG\x01true\x02PGROUP\x01pg\x02UNIQ_KEY\x01U1\x02"
            r = await b.call(codes.SEND_MESSAGE_V2, {"a": "pg", "b": "Bad", "c": "TBW102", "d": 4, "e": 1, "f": 4,
                                                     "g": int(time.time() * 1000), "h": 0, "i": props, "j": 0}, b"x")
            assert r.code == codes.SUCCESS and r.ext["queueId"] == "1" and r.ext["queueOffset"] == "0"
            phys = int(r.ext["msgId"][16:], 16)
            plain = await b.send_v2("Bad", b"plain", queue_id=0)
            plain_phys = int(plain.ext["msgId"][16:], 16)

            async def end(**over):
                ext = {"producerGroup": "pg", "tranStateTableOffset": 0, "commitLogOffset": phys,
                       "commitOrRollback": 8, "msgId": "U1", **over}
                return await b.call(codes.END_TRANSACTION, ext)
            for over, words in (({"commitLogOffset": 1 << 40}, "Find prepared transaction message failed"),
                                ({"commitLogOffset": phys + 3}, "Find prepared transaction message failed"),
                                ({"commitLogOffset": plain_phys}, "not a half message"),
                                ({"producerGroup": "other"}, "The producer group wrong"),
                                ({"tranStateTableOffset": 7}, "The transaction state table offset wrong"),
                                ({"commitOrRollback": 5}, "commitOrRollback"),
                                ({"commitLogOffset": "x"}, "commitLogOffset")):
                e = await end(**over)
                assert e.code == codes.SYSTEM_ERROR and words in e.remark, (over, e.remark)
            # nothing was stored or recorded: the half message still commits, once
            assert (await end()).code == codes.SUCCESS
            assert (await end()).code == codes.SYSTEM_ERROR
            got = await b.pull("Bad", 1, 0, suspend_ms=2000)
            assert [m.body for m in _records(got.body)] == [b"x"]
            # the broker's own topics take no sends (the pop revive log's records would be taken as
            # checkpoints and acks)
            for topic in (HALF_TOPIC, OP_TOPIC, "SCHEDULE_TOPIC_XXXX", "rmq_sys_REVIVE_LOG_DefaultCluster"):
                s = await b.send_v2(topic, b"forged")
                assert s.code == codes.NO_PERMISSION and "forbidden" in s.remark

    asyncio.run(go())


def test_slave_refuses_end_transaction(tmp_path):
    async def go():
        async with Broker(tmp_path, broker_kw={"brokerId": 1}, brokerRole="SLAVE") as b:
            e = await b.call(codes.END_TRANSACTION, {"producerGroup": "pg", "tranStateTableOffset": 0,
                                                     "commitLogOffset": 0, "commitOrRollback": 8, "msgId": "U"})
            assert e.code == codes.SLAVE_NOT_AVAILABLE and "slave" in e.remark
            assert b.controller.transaction_check._task is None  # no check service on a slave

    asyncio.run(go())


@pytest.mark.parametrize("key", ["transactionTimeOut", "transactionCheckMax", "transactionCheckInterval"])
def test_bad_transaction_key_names_it(key):
    with pytest.raises(StoreConfigError) as e:
        load_broker_config({key: "0"})
    assert key in str(e.value)


def test_check_body_is_the_stored_record_with_the_real_topic_and_queue(tmp_path):
    """CHECK_TRANSACTION_STATE's body is the half message as MessageDecoder.encode writes it:
    unchanged it is the stored record byte for byte; with the real topic it decodes to it."""
    from broker.server.transaction.transactional_message_bridge import encode_message_ext
    from broker.store.message import decode_message

    async def go():
        async with Broker(tmp_path) as b:
            # no trailing separator: properties are re-encoded without one
            r = await b.send_v2("Enc", b"body bytes", queue_id=3, extra_props="UNIQ_KEY\x01U9")
            phys = int(r.ext["msgId"][16:], 16)
            raw = bytes(b.controller.store.record_view(phys))
            m = decode_message(raw)
            assert encode_message_ext(raw, "Enc", 3, 0, phys, m.properties) == raw
            props = {**m.properties, "REAL_TOPIC": "Real"}
            out = decode_message(encode_message_ext(raw, "RealTopicName", 2, 7, 9999, props))
            assert (out.topic, out.queue_id, out.queue_offset, out.physical_offset, out.body, out.properties) == \
                ("RealTopicName", 2, 7, 9999, b"body bytes", props)
            assert (out.born_host, out.store_timestamp, out.body_crc) == (m.born_host, m.store_timestamp, m.body_crc)

    asyncio.run(go())


def test_reject_transaction_message_refuses_half_messages(tmp_path):
    async def go():
        async with Broker(tmp_path, broker_kw={"rejectTransactionMessage": True}) as b:
            r = await b.call(codes.SEND_MESSAGE_V2, {"a": "pg", "b": "Rej", "c": "TBW102", "d": 4, "e": 0, "f": 4,
                                                     "g": int(time.time() * 1000), "h": 0,
                                                     "i": "TRAN_MSG\x01true\x02PGROUP\x01pg", "j": 0}, b"x")
            assert r.code == codes.NO_PERMISSION and "transaction message is forbidden" in r.remark
            assert b.controller.store.max_offset(HALF_TOPIC, 0) == 0
            assert (await b.send_v2("Rej", b"plain")).code == codes.SUCCESS  # plain sends are not affected

    asyncio.run(go())
