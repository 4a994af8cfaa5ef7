"""The controller inside the name server (RocketMQ 5's enableControllerInNamesrv=true): `broker
namesrv -c namesrv.conf` reads RocketMQ's keys, and with the controller's keys in the same file runs
a controller on its own controllerDLegerPeers port beside the name server. Three such name servers
are the controller group: they keep answering routes while their controllers elect, and kill -9 of
the one holding the controller leader loses neither the routes on the others nor the controller's
state."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys

import msgspec
import pytest

from broker.controller import codes
from broker.namesrv.config import load_namesrv_config
from broker.remoting import codes as rcodes
from broker.store.errors import StoreConfigError
from tests.conftest import free_port, wait_for
from tests.helpers.controller_group import Heartbeats, NamesrvControllerGroup
from tests.helpers.ha_cluster import call
from tests.helpers.procs import REPO, Child
from tests.helpers.raw_wire import RawConn

G = "broker-a"
ADDRS = {1: "127.0.0.1:30911", 2: "127.0.0.1:30912", 3: "127.0.0.1:30913"}
TOPIC = "Orders"
PEERS = "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"
CONTROLLER_KEYS = f"controllerDLegerGroup=g\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\n"


def _register_route(port: int) -> RawConn:
    """REGISTER_BROKER of broker-a's master holding TOPIC, on a connection left open: a broker's
    routes leave the name server when the connection it registered on closes."""
    conn = RawConn(port)
    body = msgspec.json.encode({"topicConfigSerializeWrapper": {"topicConfigTable": {
        TOPIC: {"readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}}})
    r = conn.request(rcodes.REGISTER_BROKER, {"clusterName": "c1", "brokerAddr": ADDRS[1], "brokerName": G,
                                              "brokerId": "0", "haServerAddr": "", "compressed": "false"}, body)
    assert r.code == rcodes.SUCCESS, r.remark
    return conn


def _routes(group: NamesrvControllerGroup, i: str) -> dict:
    r = group.ask_namesrv(i, rcodes.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    assert r.code == rcodes.SUCCESS, r.remark
    return {bd["brokerName"]: bd["brokerAddrs"] for bd in msgspec.json.decode(bytes(r.body))["brokerDatas"]}


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return False
    except ConnectionRefusedError:
        return True


def test_three_name_servers_run_the_controller_group_and_keep_routing_through_its_failover(tmp_path):
    group = NamesrvControllerGroup(tmp_path, extra="scanInactiveMasterInterval=300\n").start()
    conns: list[RawConn] = []
    beats = None
    try:
        for i in group.ids:  # one process, two addresses: the name server's and the controller's
            assert group.children[i].lines[:2] == [
                f"name server listening on 127.0.0.1:{group.namesrv_ports[i]}",
                f"controller {i} of cg listening on 127.0.0.1:{group.ports[i]}; log {tmp_path / i}"]
        # routes at once, whether or not the controllers have elected their leader yet
        for i in group.ids:
            conns.append(_register_route(group.namesrv_ports[i]))
            assert _routes(group, i) == {G: {"0": ADDRS[1]}}
        # the name server's port is not the controller's (as RocketMQ: the controller answers on
        # its DLedger port)
        r = group.ask_namesrv("n0", codes.CONTROLLER_GET_METADATA_INFO)
        assert r.code == rcodes.REQUEST_CODE_NOT_SUPPORTED

        # a broker group through the controllers: ids 1..3, broker 1 the first master, all in sync
        leader = group.wait_leader()
        for bid, addr in ADDRS.items():
            r = group.leader_call(codes.CONTROLLER_REGISTER_BROKER,
                                  {"clusterName": "c1", "brokerName": G, "brokerAddress": addr})
            assert (r.code, r.ext["brokerId"]) == (codes.SUCCESS, str(bid)), r.remark
        beats = Heartbeats(group, G, ADDRS)
        r = group.leader_call(codes.CONTROLLER_ELECT_MASTER, {"clusterName": "c1", "brokerName": G, "brokerId": 1})
        assert (r.code, r.ext["masterBrokerId"], r.ext["masterEpoch"]) == (codes.SUCCESS, "1", "1"), r.remark
        # the SyncStateSet takes live brokers only: every controller has heard each of them
        wait_for(lambda: beats.rounds >= 1, 10, "a round of heartbeats")
        r = group.leader_call(codes.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": G, "masterBrokerId": 1,
                                                                       "masterEpoch": 1},
                              msgspec.json.encode({"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1}))
        assert r.code == codes.SUCCESS, r.remark
        before = group.replica_info(G)
        assert before == {"masterBrokerId": "1", "masterAddress": ADDRS[1], "masterEpoch": "1",
                          "syncStateSet": [1, 2, 3], "syncStateSetEpoch": 2}

        # kill -9 the name server whose controller leads: the others route while theirs elect
        group.kill9(leader)
        for i in group.alive():
            assert _routes(group, i) == {G: {"0": ADDRS[1]}}
        new_leader = group.wait_leader(exclude=leader)
        assert group.replica_info(G) == before  # the same masterBrokerId/masterEpoch, nothing lost
        for i in group.alive():
            assert _routes(group, i) == {G: {"0": ADDRS[1]}}

        # SIGTERM stops the controller, then the name server, and the process exits cleanly
        follower = next(i for i in group.alive() if i != new_leader)
        child = group.children[follower]
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.wait(30) == 0, child.stderr_tail()
        child.wait_lines(lambda ls: "name server stopped" in ls, 10, "the name server to stop")
        assert child.lines[-2:] == ["controller stopped", "name server stopped"]
        assert _refused(group.ports[follower]) and _refused(group.namesrv_ports[follower])
    finally:
        if beats is not None:
            beats.close()
        for c in conns:
            c.close()
        group.stop()


def _namesrv_argv(conf, *more: str) -> list[str]:
    return [sys.executable, "-m", "broker.cli", "namesrv", "-c", str(conf), *more]


@pytest.mark.parametrize("text, key", [
    ("enableControllerInNamesrv=true\ncontrollerDLegerGroup=g\ncontrollerDLegerSelfId=n0\n", "controllerDLegerPeers"),
    (f"enableControllerInNamesrv=true\ncontrollerDLegerPeers={PEERS}\ncontrollerDLegerSelfId=n0\n",
     "controllerDLegerGroup"),
    ("enableControllerInNamesrv=maybe\n", "enableControllerInNamesrv"),
    ("listenPort=70000\n", "listenPort"),
    ("scanNotActiveBrokerInterval=0\n", "scanNotActiveBrokerInterval"),
    # the controller would bind the name server's own port
    (f"listenPort=9878\nenableControllerInNamesrv=true\n{CONTROLLER_KEYS}", "controllerDLegerPeers"),
])
def test_a_bad_namesrv_conf_refuses_to_start_naming_the_key(tmp_path, text, key):
    conf = tmp_path / "namesrv.conf"
    conf.write_text(f"controllerStorePath={tmp_path / 'c'}\n{text}")
    out = subprocess.run(_namesrv_argv(conf), capture_output=True, text=True, timeout=60, cwd=str(REPO))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"broker: {key}:" in out.stderr, out.stderr
    assert "listening" not in out.stdout


def test_namesrv_conf_keys_the_listen_flag_wins_and_unread_keys_are_named(tmp_path):
    port, flag_port = free_port(), free_port()
    conf = tmp_path / "namesrv.conf"
    # RocketMQ's keys, one of ours misspelt, and controller keys with the controller off
    conf.write_text(f"listenPort={port}\nscanNotActiveBrokerInterval=5000\nlistenPrt=1\n{CONTROLLER_KEYS}")
    config, controller = load_namesrv_config(str(conf))
    assert (config.port, config.scanNotActiveBrokerInterval, config.enableControllerInNamesrv, controller) == \
        (port, 5.0, False, None)
    config, _ = load_namesrv_config(str(conf), {"listenPort": str(flag_port)})
    assert config.port == flag_port
    with pytest.raises(StoreConfigError) as e:
        load_namesrv_config(str(conf), {"enableControllerInNamesrv": "true", "controllerDLegerSelfId": "n7"})
    assert e.value.key == "controllerDLegerSelfId"

    child = Child(_namesrv_argv(conf, "--listen", f"127.0.0.1:{flag_port}"), tmp_path / "stderr")
    try:
        child.wait_lines(lambda ls: ls, 60, "the name server to listen")
        assert child.lines == [f"name server listening on 127.0.0.1:{flag_port}"]  # and no controller
        assert call(flag_port, rcodes.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}).code == rcodes.TOPIC_NOT_EXIST
        err = child.stderr_tail()
        assert "listenPrt: unknown key" in err
        for key in ("controllerDLegerGroup", "controllerDLegerPeers", "controllerDLegerSelfId"):
            assert f"{key}: a controller key in {conf}, ignored: enableControllerInNamesrv is not true" in err
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.wait(30) == 0
    finally:
        child.kill_group()
