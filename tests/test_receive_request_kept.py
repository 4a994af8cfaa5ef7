"""ReceiveMessage's fast answer on the request's bytes (ConsumerActivity.receive_bytes_now): what
_receive_args reads of a request is kept per request's exact bytes, so a client's repeated receive
costs a look-up. A changed request is read anew (never answered as the kept one), the route and
the group's config are still read per call, a request refused or that does not parse is never
kept and is answered by the method's path with its status as before, and the kept requests are
bounded."""
from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from broker.proxy import consumer_activity
from broker.proxy.config import ProxyConfig
from broker.proxy.consumer_activity import RECEIVE_KEPT_MAX, ConsumerActivity
from broker.proxy.protocol import definition_pb2 as pb
from broker.proxy.protocol import service_pb2 as spb
from tests.test_receive_now import MD, TOPIC, _Front, _messages

pytestmark = pytest.mark.timeout(120)

ADDR = "127.0.0.1:10911"


class _Route:
    def master_addr(self, name: str):
        return ADDR if name == "broker-a" else None


class _Client:
    """The routes a ConsumerActivity peeks: one route to this broker, or none (`route = None`)."""

    def __init__(self):
        self.route = _Route()
        client = self

        class Routes:
            @staticmethod
            def peek(topic):
                return client.route
        self.routes = Routes()


class _Local:
    """The broker's pop as receive_now calls it: each call's values recorded, declined (None)."""
    addr = ADDR

    def __init__(self):
        self.pops = []

    def pop_now(self, *args):
        self.pops.append(args)
        return None


def _request(group: str = "G", batch: int = 32, invisible_s: int = 60, poll_s: int = 0, expression: str = "*",
             attempt_id: str = "") -> bytes:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=batch,
        message_queue=pb.MessageQueue(topic=pb.Resource(name="T"), broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression))
    req.invisible_duration.FromSeconds(invisible_s)
    req.long_polling_timeout.FromSeconds(poll_s)
    if attempt_id:
        req.attempt_id = attempt_id
    return req.SerializeToString()


def _activity():
    act = ConsumerActivity(_Client(), ProxyConfig())
    act.local = _Local()
    return act


def _group_known(act, group: str, config=None) -> None:
    act.groups._cache[(ADDR, group)] = (time.monotonic() + 3600, config)


def _popped(args: tuple) -> tuple:
    """(group, topic, batch, invisible ms, poll ms, expression, expression type) of a pop_now call."""
    group, topic, _, batch, invisible, poll, expression, exp_type = args[:8]
    return group, topic, batch, invisible, poll, expression, exp_type


def test_a_repeated_request_is_read_once_and_a_changed_one_anew():
    async def go():
        act = _activity()
        for g in ("G", "H"):
            _group_known(act, g)
        one = _request()
        for _ in range(3):
            assert act.receive_bytes_now(bytes(one), None) is None  # (a new bytes object each call)
        assert len(act._receive_kept) == 1
        assert [_popped(a) for a in act.local.pops] == [("G", "T", 32, 60_000, 0, "*", "TAG")] * 3
        # each field changed: read anew, popped with the new values, kept beside the first
        changed = [(_request(batch=16), ("G", "T", 16, 60_000, 0, "*", "TAG")),
                   (_request(invisible_s=20), ("G", "T", 32, 20_000, 0, "*", "TAG")),
                   (_request(poll_s=5), ("G", "T", 32, 60_000, 5_000, "*", "TAG")),
                   (_request(expression="a||b"), ("G", "T", 32, 60_000, 0, "a||b", "TAG")),
                   (_request(group="H"), ("H", "T", 32, 60_000, 0, "*", "TAG"))]
        for payload, want in changed:
            act.local.pops.clear()
            act.receive_bytes_now(payload, None)
            act.receive_bytes_now(payload, None)
            assert [_popped(a) for a in act.local.pops] == [want, want]
        assert len(act._receive_kept) == 1 + len(changed)
        act.local.pops.clear()
        act.receive_bytes_now(one, None)
        assert [_popped(a) for a in act.local.pops] == [("G", "T", 32, 60_000, 0, "*", "TAG")]
        act.renewals.close()
    asyncio.run(go())


def test_the_route_and_the_group_are_still_read_per_call():
    async def go():
        act = _activity()
        _group_known(act, "G")
        one = _request()
        act.receive_bytes_now(one, None)
        assert len(act.local.pops) == 1
        act.client.route = None  # no route cached any more: declined before popping
        assert act.receive_bytes_now(one, None) is None and len(act.local.pops) == 1
        act.client.route = _Route()
        _group_known(act, "G", {"consumeMessageOrderly": True})  # the group became FIFO: declined
        assert act.receive_bytes_now(one, None) is None and len(act.local.pops) == 1
        act.groups._cache.clear()  # its config no longer fresh: declined
        assert act.receive_bytes_now(one, None) is None and len(act.local.pops) == 1
        _group_known(act, "G")
        act.receive_bytes_now(one, None)
        assert len(act.local.pops) == 2
        act.renewals.close()
    asyncio.run(go())


def test_a_request_refused_or_unreadable_is_never_kept():
    async def go():
        act = _activity()
        _group_known(act, "G")
        for payload in (_request(batch=0), _request(batch=33), _request(invisible_s=1), _request(group="bad group"),
                        b"\xff\xff\xff", b"\x0a\x05\x0a\x03"):
            for _ in range(2):
                assert act.receive_bytes_now(payload, None) is None
        assert act._receive_kept == {} and act.local.pops == []
        act.renewals.close()
    asyncio.run(go())


def test_the_kept_requests_are_bounded_and_a_named_attempt_is_not_kept():
    async def go():
        act = _activity()
        n = RECEIVE_KEPT_MAX * 2 + 7
        for i in range(n):
            _group_known(act, f"G{i}")
            act.receive_bytes_now(_request(group=f"G{i}"), None)
            assert len(act._receive_kept) <= RECEIVE_KEPT_MAX
        assert [a[0] for a in act.local.pops] == [f"G{i}" for i in range(n)]
        act._receive_kept.clear()
        _group_known(act, "G")
        act.receive_bytes_now(_request(attempt_id="a1"), None)
        act.receive_bytes_now(_request(attempt_id="a2"), None)
        assert act._receive_kept == {} and len(act.local.pops) == n + 2
        act.renewals.close()
    asyncio.run(go())


def test_bad_requests_answer_their_status_through_the_front(tmp_path):
    """Through the broker's local front and grpcio: a refused request answers the method's status,
    the first time and again (nothing kept of it), beside a good request of the same group that
    is answered fast; a message that does not parse ends the call INTERNAL, as before."""
    async def go():
        async with _Front(tmp_path) as f:
            await f.send(8)
            await f.receive("Bad", 1)  # the route and group cached
            got = _messages(await f.receive("Bad", 2))
            assert got and f.fast[-1] == "framed"
            kept = dict(f.front.service.consumers._receive_kept)
            for batch, invisible, code in ((0, 30, pb.BAD_REQUEST), (33, 30, pb.BAD_REQUEST),
                                           (8, 1, pb.ILLEGAL_INVISIBLE_TIME)):
                req = spb.ReceiveMessageRequest(
                    group=pb.Resource(name="Bad"), batch_size=batch,
                    message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC),
                                                  broker=pb.Broker(name=f.c.config.brokerName)),
                    filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
                req.invisible_duration.FromSeconds(invisible)
                req.long_polling_timeout.FromSeconds(0)
                for _ in range(2):
                    n = len(f.fast)
                    responses = [r async for r in f.stub.ReceiveMessage(req, metadata=MD, timeout=30)]
                    assert f.fast[n:] == [None]
                    assert len(responses) == 1 and responses[0].status.code == code, responses
            assert f.front.service.consumers._receive_kept == kept
            raw = f.channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage",
                                         request_serializer=lambda b: b, response_deserializer=lambda b: b)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                [r async for r in raw(b"\xff\xff\xff", metadata=MD, timeout=30)]
            assert e.value.code() == grpc.StatusCode.INTERNAL
            assert _messages(await f.receive("Bad", 2))  # the good request still answered
    asyncio.run(go())


def test_the_module_bound():
    assert consumer_activity.RECEIVE_KEPT_MAX == RECEIVE_KEPT_MAX > 0
