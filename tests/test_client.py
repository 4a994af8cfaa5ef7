"""The project's own client against a real name server and broker on loopback (in-process, real
sockets): producer (sync, async, oneway, batch, compressed), pull and push consumers (retry through
%RETRY%, queue sharing, offset resume) and admin calls."""
from __future__ import annotations

import asyncio
import zlib

import pytest

from broker.client.admin import Admin
from broker.client.errors import BrokerUnreachable, ClientError
from broker.client.message import Message
from broker.client.producer import SEND_OK, Producer
from broker.client.pull_consumer import PullConsumer
from broker.client.push_consumer import PushConsumer, allocate_averagely
from broker.client.route import MessageQueue
from broker.namesrv.server import NamesrvConfig, NamesrvController
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from tests.conftest import free_port, small_config
from tests.helpers.procs import async_wait_until as until

LEVELS = "50ms 100ms 200ms 300ms 400ms 500ms"
# Long polls held as long as Java's (15 s): a missed wake-up of a held pull (a message landing
# between the pull's look and its hold) would stall these tests past their waits.
SUSPEND_MS = 15000


class Cluster:
    """A name server and one broker registered with it, both in this process."""

    def __init__(self, tmp_path, **broker_kw):
        self.tmp_path = tmp_path
        self.broker_kw = broker_kw

    async def __aenter__(self) -> Cluster:
        self.ns = NamesrvController(NamesrvConfig(host="127.0.0.1", port=0))
        await self.ns.start()
        self.namesrv = f"127.0.0.1:{self.ns.port}"
        cfg = BrokerConfig(namesrvAddr=self.namesrv, **self.broker_kw)
        self.broker = BrokerController(cfg, small_config(self.tmp_path / "store", listenPort=free_port(),
                                                         brokerIP1="127.0.0.1"), host="127.0.0.1")
        await self.broker.start()
        await until(lambda: "TBW102" in self.ns.routes.topic_queue_table, what="the broker's registration")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.broker.close()
        await self.ns.close()

    async def create_topic(self, topic: str, queues: int = 4) -> None:
        async with Admin(self.namesrv) as admin:
            assert await admin.create_topic(topic, queues) == [self.broker.addr]
        await until(lambda: topic in self.ns.routes.topic_queue_table, what=f"the route of {topic}")


def test_send_then_pull_keeps_body_tags_keys_and_properties(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T1")
            async with Producer("pg", c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                r = await p.send(Message("T1", b"hello", tags="TagA", keys=["k1", "k2"], properties={"color": "red"}))
                assert r.status == SEND_OK and r.queue_offset == 0 and len(r.msg_id) == 32
                assert r.queue.topic == "T1" and r.queue.broker_name == "broker-a"
                queues = await pc.fetch_queues("T1")
                assert [q.queue_id for q in queues] == [0, 1, 2, 3] and r.queue in queues
                res = await pc.pull(r.queue, 0)
                assert res.status == "FOUND" and res.next_begin_offset == 1 and res.max_offset == 1
                [m] = res.messages
                assert (m.topic, m.body, m.tags, m.keys, m.properties["color"]) == ("T1", b"hello", "TagA", "k1 k2", "red")
                assert m.uniq_key == r.msg_id and m.msg_id == r.offset_msg_id and m.queue_offset == 0
                # tag filtering: the broker skips what the expression does not name
                assert (await pc.pull(r.queue, 0, sub_expression="TagB")).messages == []
                assert (await pc.pull(r.queue, 0, sub_expression="TagB || TagA")).messages[0].body == b"hello"
                assert (await pc.pull(r.queue, 1)).status == "NO_NEW_MSG"
                assert (await pc.pull(r.queue, 50)).status == "OFFSET_ILLEGAL"
                await pc.update_offset(r.queue, 1)
                assert await pc.fetch_offset(r.queue) == 1
                assert await pc.max_offset(r.queue) == 1
    asyncio.run(go())


def test_200_async_sends_are_all_acknowledged_round_robin(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T2")
            async with Producer("pg", c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                futs = [p.send_async(Message("T2", f"m{i}".encode())) for i in range(200)]
                results = await asyncio.gather(*futs)
                assert all(r.status == SEND_OK for r in results)
                assert len({r.msg_id for r in results}) == 200
                # GET_MAX_OFFSET reads the consume queues, which the reput builds after the append
                await until(lambda: sum(c.broker.store.max_offset("T2", q) for q in range(4)) == 200,
                            what="the 200 messages dispatched")
                per_queue = {q: await pc.max_offset(q) for q in await pc.fetch_queues("T2")}
                assert sorted(per_queue.values()) == [50, 50, 50, 50]  # round-robin over the 4 queues
                bodies = set()
                for q in per_queue:
                    res = await pc.pull(q, 0, max_nums=64)
                    bodies |= {m.body for m in res.messages}
                assert bodies == {f"m{i}".encode() for i in range(200)}
                await p.send_oneway(Message("T2", b"oneway"))
                await until(lambda: sum(c.broker.store.max_offset("T2", q) for q in range(4)) == 201,
                            what="the oneway message stored")
    asyncio.run(go())


def test_batch_send_stores_every_message_in_one_queue(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T3")
            async with Producer("pg", c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                await p.send(Message("T3", b"first"))
                r = await p.send_batch([Message("T3", f"b{i}".encode(), tags="B", keys=f"key{i}") for i in range(10)])
                assert r.status == SEND_OK and len(r.msg_id.split(",")) == 10
                assert len(r.offset_msg_id.split(",")) == 10
                res = await pc.pull(r.queue, r.queue_offset, max_nums=32)
                assert [m.body for m in res.messages] == [f"b{i}".encode() for i in range(10)]
                assert [m.uniq_key for m in res.messages] == r.msg_id.split(",")
                assert [m.keys for m in res.messages] == [f"key{i}" for i in range(10)]
                assert all(m.tags == "B" for m in res.messages)
    asyncio.run(go())


def test_body_over_4k_is_stored_compressed_and_comes_back_inflated(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T4")
            body = b"".join(b"line %06d of a compressible body\n" % i for i in range(3000))  # ~100 KiB
            async with Producer("pg", c.namesrv) as p, PullConsumer("cg", c.namesrv) as pc:
                r = await p.send(Message("T4", body))
                small = await p.send(Message("T4", b"x" * 4096))
                [m] = (await pc.pull(r.queue, r.queue_offset, max_nums=1)).messages
                assert m.body == body and m.sys_flag & 1
                stored = c.broker.store.lookup(m.commit_log_offset)
                assert len(stored.body) < len(body) // 5 and zlib.decompress(bytes(stored.body)) == body
                [s] = (await pc.pull(small.queue, small.queue_offset, max_nums=1)).messages
                assert s.body == b"x" * 4096 and not s.sys_flag & 1  # 4096 itself is not "over"
    asyncio.run(go())


def test_push_consumer_consumes_all_and_failures_come_back_through_retry(tmp_path):
    async def go():
        async with Cluster(tmp_path, messageDelayLevel=LEVELS) as c:
            await c.create_topic("T5")
            got: list = []
            all_in = asyncio.Event()

            def listener(msgs):
                for m in msgs:
                    got.append((m.body, m.reconsume_times, m.topic, m.tags))
                    if len(got) >= 22:
                        all_in.set()
                    if m.reconsume_times == 0 and m.body == b"m7":
                        return False
                    if m.reconsume_times == 0 and m.body == b"m8":
                        raise RuntimeError("listener failure")
                return True

            consumer = PushConsumer("cg5", c.namesrv, consume_from_first=True, suspend_ms=SUSPEND_MS)
            consumer.subscribe("T5", "*")
            consumer.register(listener)
            async with Producer("pg", c.namesrv) as p:
                await consumer.start()
                try:
                    for i in range(20):
                        await p.send(Message("T5", f"m{i}".encode(), tags="TagA"))
                    await asyncio.wait_for(all_in.wait(), 15)
                finally:
                    await consumer.shutdown()
            first = [b for b, n, _, _ in got if n == 0]
            assert sorted(first) == sorted(f"m{i}".encode() for i in range(20))
            again = sorted((b, n, t, tag) for b, n, t, tag in got if n > 0)
            # redelivered once, through %RETRY%cg5, with the original topic and tags restored
            assert again == [(b"m7", 1, "T5", "TagA"), (b"m8", 1, "T5", "TagA")]
            assert c.broker.store.max_offset("%RETRY%cg5", 0) == 2
    asyncio.run(go())


def test_push_consumer_batches_and_per_message_answers_send_back_only_the_failed(tmp_path):
    """consumeMessageBatchMaxSize: a pull's messages reach the listener in lists of at most that
    many; a list of answers fails only the messages answered False."""
    async def go():
        async with Cluster(tmp_path, messageDelayLevel=LEVELS) as c:
            await c.create_topic("T5B", 1)
            sizes: list[int] = []
            got: list = []
            all_in = asyncio.Event()

            def listener(msgs):
                sizes.append(len(msgs))
                got.extend((m.body, m.reconsume_times) for m in msgs)
                if len(got) >= 21:
                    all_in.set()
                return [not (m.reconsume_times == 0 and m.body == b"m5") for m in msgs]

            consumer = PushConsumer("cg5b", c.namesrv, consume_from_first=True, suspend_ms=SUSPEND_MS,
                                    consume_message_batch_max_size=8)
            consumer.subscribe("T5B", "*")
            consumer.register(listener)
            async with Producer("pg", c.namesrv) as p:
                for i in range(20):  # all queued before the consumer starts: one pull
                    await p.send(Message("T5B", f"m{i}".encode()))
                await consumer.start()
                try:
                    await asyncio.wait_for(all_in.wait(), 15)
                finally:
                    await consumer.shutdown()
            assert sizes[:3] == [8, 8, 4]
            assert sorted(b for b, n in got if n == 0) == sorted(f"m{i}".encode() for i in range(20))
            assert [(b, n) for b, n in got if n > 0] == [(b"m5", 1)]  # its batch's others were not sent back
            assert c.broker.store.max_offset("%RETRY%cg5b", 0) == 1
            for bad in (0, 1025):
                with pytest.raises(ClientError, match="consumeMessageBatchMaxSize"):
                    PushConsumer("cg5c", c.namesrv, consume_message_batch_max_size=bad)
    asyncio.run(go())


def test_two_push_consumers_of_one_group_split_the_queues(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T6")
            got = {"a": [], "b": []}
            consumers = []
            for name in ("a", "b"):
                pc = PushConsumer("cg6", c.namesrv, consume_from_first=True, suspend_ms=SUSPEND_MS)
                pc.subscribe("T6")
                pc.register(lambda msgs, name=name: got[name].extend(m.uniq_key for m in msgs) or True)
                consumers.append(pc)
            a, b = consumers
            await a.start()
            await b.start()
            try:
                t6 = {MessageQueue("T6", "broker-a", i) for i in range(4)}

                def split():
                    qa, qb = a.assigned_queues & t6, b.assigned_queues & t6
                    return len(qa) == 2 and len(qb) == 2 and qa | qb == t6
                await until(split, what="the queues shared out between the two members")
                async with Producer("pg", c.namesrv) as p:
                    sent = [(await p.send(Message("T6", f"m{i}".encode()))).msg_id for i in range(100)]
                await until(lambda: len(got["a"]) + len(got["b"]) >= 100, what="every message consumed")
            finally:
                await a.shutdown()
                await b.shutdown()
            assert sorted(got["a"] + got["b"]) == sorted(sent)  # none twice, none lost
            assert got["a"] and got["b"]
    asyncio.run(go())


def test_offsets_are_committed_and_a_restarted_consumer_resumes(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T7")
            async with Producer("pg", c.namesrv) as p:
                old = [(await p.send(Message("T7", f"old{i}".encode()))).msg_id for i in range(10)]
                got: list = []
                c1 = PushConsumer("cg7", c.namesrv, consume_from_first=True, suspend_ms=SUSPEND_MS)
                c1.subscribe("T7")
                c1.register(lambda msgs: got.extend(m.uniq_key for m in msgs) or True)
                await c1.start()
                await until(lambda: len(got) >= 10, what="the first ten consumed")
                await c1.shutdown()
                assert sorted(got) == sorted(old)
                async with Admin(c.namesrv) as admin:
                    lags = await admin.consumer_offsets("cg7", "T7")
                assert sum(r.committed for r in lags) == 10 and sum(r.lag for r in lags) == 0
                new = [(await p.send(Message("T7", f"new{i}".encode()))).msg_id for i in range(5)]
            got2: list = []
            c2 = PushConsumer("cg7", c.namesrv, consume_from_first=True, suspend_ms=SUSPEND_MS)
            c2.subscribe("T7")
            c2.register(lambda msgs: got2.extend(m.uniq_key for m in msgs) or True)
            await c2.start()
            try:
                await until(lambda: len(got2) >= 5, what="the new five consumed")
            finally:
                await c2.shutdown()
            # per queue in order: a message consumed before the restart would have come first
            assert sorted(got2) == sorted(new)
    asyncio.run(go())


def test_admin_creates_lists_and_routes_topics(tmp_path):
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T8", queues=3)
            async with Admin(c.namesrv) as admin:
                assert "T8" in await admin.topic_list()
                route = await admin.route("T8")
                assert [(q.brokerName, q.readQueueNums, q.writeQueueNums) for q in route.queueDatas] == [("broker-a", 3, 3)]
                assert route.broker_addrs() == {"broker-a": c.broker.addr}
                info = await admin.cluster_info()
                assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
                assert await admin.master_addrs("DefaultCluster") == [c.broker.addr]
                status = await admin.broker_status(c.broker.addr)
                assert status["brokerVersionDesc"] == "V4_9_4" and int(status["commitLogMaxOffset"]) == 0
                lags = await admin.consumer_offsets("nobody", "T8")
                # nothing committed and nothing to read: "not found" (-1), as RocketMQ 5.5.0 answers it
                assert [(r.queue.queue_id, r.committed, r.max_offset) for r in lags] == [(0, -1, 0), (1, -1, 0), (2, -1, 0)]
    asyncio.run(go())


def test_unreachable_name_server_is_named_in_the_error(tmp_path):
    async def go():
        port = free_port()
        async with Producer("pg", f"127.0.0.1:{port}") as p:
            with pytest.raises(BrokerUnreachable) as e:
                await p.send(Message("T", b"x"))
        assert f"127.0.0.1:{port}" in str(e.value)
    asyncio.run(go())


def test_allocate_averagely_matches_rocketmq():
    mqs = [MessageQueue("T", "b", i) for i in range(5)]
    cids = ["c1", "c2"]
    assert [q.queue_id for q in allocate_averagely("c1", cids, mqs)] == [0, 1, 2]
    assert [q.queue_id for q in allocate_averagely("c2", cids, mqs)] == [3, 4]
    assert allocate_averagely("c3", cids, mqs) == []
    assert [len(allocate_averagely(c, ["c1", "c2", "c3"], mqs[:2])) for c in ("c1", "c2", "c3")] == [1, 1, 0]


def test_sync_producer_sends_from_a_thread_without_a_loop(tmp_path):
    from broker.client.sync import SyncProducer

    def script(namesrv):  # what a plain script does: no asyncio in sight
        with SyncProducer("pg", namesrv) as p:
            return [p.send(Message("T9", f"s{i}".encode())) for i in range(3)] + [
                p.send_batch([Message("T9", b"b1"), Message("T9", b"b2")])]

    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T9")
            results = await asyncio.to_thread(script, c.namesrv)
            assert [r.status for r in results] == [SEND_OK] * 4
            await until(lambda: sum(c.broker.store.max_offset("T9", q) for q in range(4)) == 5,
                        what="the five messages dispatched to their queues")
    asyncio.run(go())


def test_send_to_a_broker_that_went_away_fails_after_three_attempts_naming_it(tmp_path):
    from broker.client.errors import SendFailed

    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T10")
            async with Producer("pg", c.namesrv) as p:
                assert (await p.send(Message("T10", b"before"))).status == SEND_OK
                # the broker stops listening but stays registered: the route still names it
                await c.broker.server.close()
                with pytest.raises(SendFailed) as e:
                    await p.send(Message("T10", b"after"))
                assert len(e.value.causes) == 3
                assert all(isinstance(x, BrokerUnreachable) and x.addr == c.broker.addr for x in e.value.causes)
    asyncio.run(go())


def test_a_connection_that_closes_as_it_is_handed_out_is_retried_not_raised(tmp_path):
    """A broker killed as it accepts: the client's connect completes, and the connection is closed
    before the send's coroutine resumes (a DLedger leader-kill test met it: the producer raised
    the raw ConnectionClosed). That schedule cannot be forced with a real kill, so the test closes
    the real connection to the real broker at the moment connection() hands it out, once; the
    send must count it as that attempt's failure and succeed on the next one."""
    async def go():
        async with Cluster(tmp_path) as c:
            await c.create_topic("T11")
            async with Producer("pg", c.namesrv) as p:
                client = p.client
                real = client.connection
                closed = []

                async def closing_once(addr):
                    ch = await real(addr)
                    if addr == c.broker.addr and not closed:
                        ch.transport.abort()
                        await until(lambda: ch.transport is None, what="connection_lost")  # closed, as handed out
                        closed.append(addr)
                    return ch
                client.connection = closing_once
                await p.send(Message("T11", b"before"))  # the route is known, the broker connected
                client.conns[c.broker.addr].transport.abort()  # the next send goes through connection()
                r = await p.send(Message("T11", b"after a closed connection"))
                assert closed and r.status == SEND_OK
    asyncio.run(go())
