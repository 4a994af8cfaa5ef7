"""The name server: RouteInfoManager's bookkeeping (expiry by an injected clock), and over real
sockets a broker registering, routes as both clients read them, auto-created topics, a broker's
crash or shutdown leaving the routes, several name servers side by side, and `broker run`."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import grpc
import msgspec
import pytest

from broker.namesrv.route_info import RouteError, RouteInfoManager, TopicQueues
from broker.namesrv.server import NamesrvConfig, NamesrvController
from broker.remoting import codes
from broker.server.broker_config import BrokerConfig
from broker.server.broker_controller import BrokerController
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.store.config import MessageStoreConfig
from tests.conftest import free_port
from tests.helpers.procs import async_wait_until

TBW = {"TBW102": TopicQueues(8, 8, 7), "Orders": TopicQueues(2, 2, 6)}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


# -- RouteInfoManager ----------------------------------------------------------------------------
def test_route_lists_master_and_slave_by_id_and_quoted_keys():
    r = RouteInfoManager(Clock())
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912", TBW)
    res = r.register_broker("c1", "10.0.0.2:10911", "broker-a", 1, "", TBW)
    assert res.master_addr == "10.0.0.1:10911" and res.ha_server_addr == "10.0.0.1:10912"
    route = r.pickup_topic_route("Orders")
    assert route["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
                                    "topicSysFlag": 0, "topicSynFlag": 0}]
    assert route["brokerDatas"] == [{"cluster": "c1", "brokerName": "broker-a",
                                     "brokerAddrs": {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"},
                                     "enableActingMaster": False}]
    # a slave promoted under id 0 from its own address replaces, never duplicates, itself
    r.unregister_broker("c1", "10.0.0.1:10911", "broker-a", 0)
    r.register_broker("c1", "10.0.0.2:10911", "broker-a", 0, "", TBW)
    assert r.pickup_topic_route("Orders")["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.2:10911"}


def test_a_slave_routes_topics_its_master_never_registered():
    """RocketMQ takes queues from masters only; here a slave's registration fills in the topics
    its broker name has no queues for (the master died before registering them), and the
    master's registration stays the authority while it lives."""
    r = RouteInfoManager(Clock())
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912", TBW)
    learned = {**TBW, "Orders": TopicQueues(1, 1, 6), "Late": TopicQueues(3, 3, 6)}
    r.register_broker("c1", "10.0.0.2:10911", "broker-a", 1, "", learned)
    assert r.pickup_topic_route("Orders")["queueDatas"][0]["readQueueNums"] == 2  # the master's, untouched
    late = r.pickup_topic_route("Late")
    assert late["queueDatas"][0]["readQueueNums"] == 3 and late["brokerDatas"][0]["brokerName"] == "broker-a"
    r.unregister_broker("c1", "10.0.0.1:10911", "broker-a", 0)  # the master gone: its slave serves both
    assert r.pickup_topic_route("Late")["brokerDatas"][0]["brokerAddrs"] == {"1": "10.0.0.2:10911"}
    assert r.pickup_topic_route("Orders")["brokerDatas"][0]["brokerAddrs"] == {"1": "10.0.0.2:10911"}
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "10.0.0.1:10912", TBW)  # back, without Late
    assert "Late" not in r.topic_list()  # (its route is now the auto-create default, from TBW102)


def test_unknown_topics_retry_topics_and_auto_create_off():
    r = RouteInfoManager(Clock(), default_topic_queue_nums=4)
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "", TBW)
    r.register_broker("c1", "10.0.0.3:10911", "broker-b", 0, "", {"Orders": TopicQueues(2, 2, 6)})  # no TBW102
    auto = r.pickup_topic_route("Fresh")
    assert [(q["brokerName"], q["writeQueueNums"]) for q in auto["queueDatas"]] == [("broker-a", 4)]
    retry = r.pickup_topic_route("%RETRY%g1")
    assert [(q["brokerName"], q["readQueueNums"]) for q in retry["queueDatas"]] == [("broker-a", 1), ("broker-b", 1)]
    off = RouteInfoManager(Clock(), auto_create_topic=False)
    off.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "", TBW)
    assert off.pickup_topic_route("Fresh") is None
    assert off.pickup_topic_route("%RETRY%g1") is not None


def test_a_registration_replaces_the_brokers_topic_table():
    r = RouteInfoManager(Clock())
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "", TBW)
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "", {"TBW102": TopicQueues(8, 8, 7)})
    assert "Orders" not in r.topic_list()
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "", None)  # an empty body keeps them
    assert r.topic_list() == ["TBW102"]


def test_a_silent_broker_expires_after_120_s_and_a_closed_channel_at_once():
    clock = Clock()
    r = RouteInfoManager(clock)
    r.register_broker("c1", "10.0.0.1:10911", "broker-a", 0, "", TBW)
    r.register_broker("c1", "10.0.0.3:10911", "broker-b", 0, "", TBW, channel="chan-b")
    clock.now += 119
    r.register_broker("c1", "10.0.0.3:10911", "broker-b", 0, "", TBW, channel="chan-b")  # b's heartbeat
    assert r.scan_not_active_brokers() == []
    clock.now += 2
    assert r.scan_not_active_brokers() == ["10.0.0.1:10911"]
    assert [q["brokerName"] for q in r.pickup_topic_route("Orders")["queueDatas"]] == ["broker-b"]
    assert r.cluster_info()["clusterAddrTable"] == {"c1": ["broker-b"]}
    r.connection_closed("chan-b")
    assert r.pickup_topic_route("Orders") is None and r.cluster_info() == {"brokerAddrTable": {},
                                                                           "clusterAddrTable": {}}


@pytest.mark.parametrize("args", [("", "10.0.0.1:1", "b", 0), ("c", "nohost", "b", 0), ("c", "10.0.0.1:1", "b", -1),
                                  ("c", "10.0.0.1:99999", "b", 0)])
def test_bad_registrations_are_refused_by_name(args):
    with pytest.raises(RouteError):
        RouteInfoManager(Clock()).register_broker(*args)


# -- over sockets --------------------------------------------------------------------------------
async def _call(port, code, ext=None, body=b""):
    conn = await connect("127.0.0.1", port)
    try:
        return await conn.request(RemotingCommand.request(code, ext or {}, body), 5)
    finally:
        conn.close()


async def _route(port, topic):
    r = await _call(port, codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return msgspec.json.decode(bytes(r.body)) if r.code == codes.SUCCESS else r.code


def _broker(tmp_path, namesrvs, **kw) -> BrokerController:
    store = MessageStoreConfig(storePathRootDir=str(tmp_path / "store"), mappedFileSizeCommitLog=1 << 20,
                               listenPort=free_port(), brokerIP1="127.0.0.1")
    conf = BrokerConfig(namesrvAddr=";".join(f"127.0.0.1:{n.port}" for n in namesrvs), **kw)
    return BrokerController(conf, store, host="127.0.0.1")


def test_broker_registers_with_every_name_server_and_leaves_on_shutdown(tmp_path):
    async def main():
        ns = [NamesrvController(NamesrvConfig(port=0)) for _ in range(2)]
        for n in ns:
            await n.start()
        broker = _broker(tmp_path, ns, brokerName="broker-x", brokerClusterName="cx")
        await broker.start()
        try:
            for n in ns:
                await async_wait_until(lambda: "broker-x" in n.routes.broker_addr_table, 5, "registration")
                route = await _route(n.port, "TBW102")
                assert route["brokerDatas"] == [{"cluster": "cx", "brokerName": "broker-x",
                                                 "brokerAddrs": {"0": broker.addr}, "enableActingMaster": False}]
            # an unknown topic: routed to the master, created there by the first send, re-registered
            route = await _route(ns[0].port, "Fresh")
            assert route["queueDatas"][0]["writeQueueNums"] == 4
            r = await _call(broker.server.port, codes.SEND_MESSAGE_V2, {
                "a": "pg", "b": "Fresh", "c": "TBW102", "d": 4, "e": 3, "f": 0, "g": 0, "h": 0, "i": "", "j": 0,
                "k": False}, b"hello")
            assert r.code == codes.SUCCESS
            await async_wait_until(lambda: "Fresh" in ns[1].routes.topic_queue_table, 5, "re-registration")
            topics = msgspec.json.decode(bytes((await _call(ns[1].port, codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body))
            assert "Fresh" in topics["topicList"]
            info = msgspec.json.decode(bytes((await _call(ns[1].port, codes.GET_BROKER_CLUSTER_INFO)).body))
            assert info["clusterAddrTable"] == {"cx": ["broker-x"]}
            # a garbage registration is refused on its own connection; the name server lives on
            bad = await _call(ns[0].port, codes.REGISTER_BROKER, {"clusterName": "c", "brokerAddr": "x",
                                                                  "brokerName": "b", "brokerId": 0}, b"{nope")
            assert bad.code == codes.SYSTEM_ERROR and "not JSON" in bad.remark
        finally:
            await broker.close()
        for n in ns:  # UNREGISTER_BROKER on the way out: nothing routes to it any more
            assert await _route(n.port, "TBW102") == codes.TOPIC_NOT_EXIST
            await n.close()
    asyncio.run(main())


def test_a_killed_broker_leaves_the_routes_when_its_connection_closes(tmp_path):
    """kill -9 of a real broker process: no unregister is sent, the name server notices the
    broker's registration connection closing (as RocketMQ's channel-closed event) at once."""
    async def main():
        ns = NamesrvController(NamesrvConfig(port=0))
        await ns.start()
        conf = tmp_path / "broker.conf"
        conf.write_text(f"namesrvAddr=127.0.0.1:{ns.port}\nlistenPort={free_port()}\nbrokerIP1=127.0.0.1\n"
                        f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeCommitLog=1048576\n")
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "broker.cli", "serve", "-c", str(conf),
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                    start_new_session=True)
        try:
            await async_wait_until(lambda: "broker-a" in ns.routes.broker_addr_table, 30, "registration")
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            t0 = time.monotonic()
            await async_wait_until(lambda: not ns.routes.broker_addr_table, 5, "removal")
            assert time.monotonic() - t0 < 5  # not the 120 s expiry
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
            await ns.close()
    asyncio.run(main())


@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c"])
def test_broker_run_starts_both_and_stops_both_on_sigterm(tmp_path, stop):
    """SIGTERM to `broker run`, or Ctrl-C (SIGINT to its whole process group, as a terminal sends
    it, every child getting it too): either stops everything cleanly, and no child is restarted on
    the way out."""
    ns_port, broker_port, grpc_port = free_port(), free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "run", "--store-root", str(tmp_path / "data"),
                             "--namesrv-listen", f"127.0.0.1:{ns_port}", "--listen-port", str(broker_port),
                             "--grpc-port", str(grpc_port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        async def routed():
            deadline = time.monotonic() + 30
            while True:
                try:
                    route = await _route(ns_port, "TBW102")
                    if isinstance(route, dict):
                        return route
                except OSError:
                    pass
                assert time.monotonic() < deadline, "no route from `broker run` within 30 s"
                await asyncio.sleep(0.05)  # another process's socket: nothing to wait on but retries
        route = asyncio.run(routed())
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": f"127.0.0.1:{broker_port}"}
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:  # the front answers too
            grpc.channel_ready_future(channel).result(timeout=60)
        if stop == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        assert "stopped cleanly" in out and "name server stopped" in out
        assert "restarting" not in out, out
        # the broker's gRPC front (local mode) started with it and stopped before it
        assert f"grpc proxy listening on 127.0.0.1:{grpc_port}" in out and "grpc proxy stopped" in out
        assert (tmp_path / "data" / "commitlog").is_dir()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
