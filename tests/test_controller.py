"""The RocketMQ 5 controller (issue 18, step 1): its state machine, its config, and three
`broker controller` processes on loopback electing the master of a broker group."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from broker.controller import codes
from broker.controller.config import ControllerConfig, load_controller_config
from broker.controller.events import (AlterSyncStateSetEvent, ApplyBrokerIdEvent, ElectMasterEvent, EventFormatError,
                                      NoopEvent, decode_event, encode_event)
from broker.controller.replicas_info import ControllerError, ReplicasInfoManager
from broker.store.errors import StoreConfigError
from tests.conftest import free_port, wait_for
from tests.helpers.controller_group import ControllerGroup, Heartbeats

G = "broker-a"
ADDRS = {1: "127.0.0.1:30911", 2: "127.0.0.1:30912", 3: "127.0.0.1:30913"}


# -- the state machine ---------------------------------------------------------------------------
def _log_of(m: ReplicasInfoManager, events: list):
    """Apply a check's event as the leader does (checked, then applied) and record its bytes."""
    def step(event):
        if event is not None:
            events.append(encode_event(event))
            m.apply(decode_event(events[-1]))
    return step


def _registered_group(unclean: bool = False) -> tuple[ReplicasInfoManager, list[bytes]]:
    m, log = ReplicasInfoManager(unclean), []
    step = _log_of(m, log)
    for bid, addr in ADDRS.items():
        got, ev = m.apply_broker_id("c1", G, addr)
        assert got == bid
        step(ev)
    step(m.elect_master(G, 1).event)
    step(m.alter_sync_state_set(G, 1, 1, {1, 2}, 1))
    return m, log


def test_events_apply_deterministically_and_replay_equals_live():
    m, log = _registered_group()
    live = m.snapshot()
    assert live[G] == {"clusterName": "c1", "nextAssignBrokerId": 4, "brokers": ADDRS, "masterBrokerId": 1,
                       "masterEpoch": 1, "syncStateSet": [1, 2], "syncStateSetEpoch": 2}
    # the master dies: the controller elects from the SyncStateSet, never broker 3
    step = _log_of(m, log)
    step(m.elect_master(G, -1, alive=lambda b: b != 1).event)
    assert m.snapshot()[G] == {**live[G], "masterBrokerId": 2, "masterEpoch": 2, "syncStateSet": [2],
                                    "syncStateSetEpoch": 3}
    replayed = ReplicasInfoManager()
    for body in log:
        replayed.apply(decode_event(body))
    assert replayed.snapshot() == m.snapshot()
    again = ReplicasInfoManager()
    for body in log:
        again.apply(decode_event(body))
    assert again.snapshot() == replayed.snapshot()


def test_ids_are_stable_per_address():
    m, _ = _registered_group()
    for bid, addr in ADDRS.items():
        assert m.apply_broker_id("c1", G, addr) == (bid, None)  # no event: nothing to change
        assert m.apply_broker_id("c1", G, addr, bid) == (bid, None)
    bid, ev = m.apply_broker_id("c1", G, "127.0.0.1:30914", 4)
    assert (bid, ev.brokerId) == (4, 4)


@pytest.mark.parametrize("refusal, code", [
    (lambda m: m.elect_master("broker-x", 1), codes.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED),
    (lambda m: m.alter_sync_state_set("broker-x", 1, 1, {1}, 1), codes.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    (lambda m: m.check_owner("broker-x", 1, ADDRS[1]), codes.CONTROLLER_BROKER_METADATA_NOT_EXIST),
    (lambda m: m.alter_sync_state_set(G, 1, 0, {1, 2, 3}, 2), codes.CONTROLLER_FENCED_MASTER_EPOCH),
    (lambda m: m.alter_sync_state_set(G, 1, 1, {1, 2, 3}, 1), codes.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    (lambda m: m.alter_sync_state_set(G, 2, 1, {1, 2, 3}, 2), codes.CONTROLLER_INVALID_MASTER),
    (lambda m: m.alter_sync_state_set(G, 1, 1, {1, 2, 7}, 2), codes.CONTROLLER_INVALID_REPLICAS),
    (lambda m: m.alter_sync_state_set(G, 1, 1, {2, 3}, 2), codes.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    (lambda m: m.alter_sync_state_set(G, 1, 1, {1, 2, 3}, 2, alive=lambda b: b != 3),
     codes.CONTROLLER_BROKER_NOT_ALIVE),
    (lambda m: m.elect_master(G, 3, designate=True), codes.CONTROLLER_ELECT_MASTER_FAILED),  # outside the set
    # broker 3 (alive, outside the set) asks while the set is dead
    (lambda m: m.elect_master(G, 3, alive=lambda b: b == 3), codes.CONTROLLER_ELECT_MASTER_FAILED),
    (lambda m: m.elect_master(G, -1), codes.CONTROLLER_MASTER_STILL_EXIST),
    (lambda m: m.elect_master(G, 9), codes.CONTROLLER_BROKER_ID_INVALID),
    (lambda m: m.check_owner(G, 2, ADDRS[1]), codes.CONTROLLER_BROKER_ID_INVALID),  # an id it does not own
    (lambda m: m.check_owner(G, 9, ADDRS[1]), codes.CONTROLLER_BROKER_ID_INVALID),
    (lambda m: m.apply_broker_id("c1", G, ADDRS[1], 2), codes.CONTROLLER_BROKER_ID_INVALID),
    (lambda m: m.apply_broker_id("c1", G, "127.0.0.1:1", 2), codes.CONTROLLER_BROKER_ID_INVALID),
    (lambda m: m.apply_broker_id("c2", G, "127.0.0.1:1"), codes.CONTROLLER_INVALID_REQUEST),
    (lambda m: m.clean_broker_data(G, [1]), codes.CONTROLLER_INVALID_CLEAN_BROKER_METADATA),  # alive
])
def test_refusals_leave_the_state_unchanged(refusal, code):
    m, _ = _registered_group()
    # the master (1) and the SyncStateSet {1, 2}, epochs 1 and 2, broker 3 registered outside it
    before = copy.deepcopy(m.snapshot())
    with pytest.raises(ControllerError) as e:
        refusal(m)
    assert e.value.code == code, e.value
    assert str(e.value)
    assert m.snapshot() == before


def test_unclean_election_only_when_enabled():
    for unclean, expect in ((False, None), (True, 3)):
        m, _ = _registered_group(unclean)
        outcome = m.elect_master(G, -1, alive=lambda b: b == 3)
        assert outcome.masterBrokerId == expect
        if expect is None:  # the master is gone and nobody may replace it: the group has no master
            assert outcome.event == ElectMasterEvent(brokerName=G, newMasterBrokerId=None)
            m.apply(outcome.event)
            assert m.snapshot()[G]["masterBrokerId"] is None and m.snapshot()[G]["masterEpoch"] == 2
            assert m.snapshot()[G]["syncStateSet"] == [1, 2]


def test_designated_election_inside_the_set():
    m, _ = _registered_group()
    outcome = m.elect_master(G, 2, designate=True)
    m.apply(outcome.event)
    assert (m.snapshot()[G]["masterBrokerId"], m.snapshot()[G]["masterEpoch"]) == (2, 2)


def test_event_format():
    body = encode_event(ApplyBrokerIdEvent(clusterName="c", brokerName=G, brokerAddress="a:1", brokerId=1))
    assert msgspec.json.decode(body)["type"] == "ApplyBrokerId" and msgspec.json.decode(body)["v"] == 1
    assert decode_event(encode_event(NoopEvent(leaderId="n0"))) == NoopEvent(leaderId="n0")
    assert decode_event(encode_event(AlterSyncStateSetEvent(brokerName=G, syncStateSet=[1]))).syncStateSet == [1]
    with pytest.raises(EventFormatError, match="version 2"):
        decode_event(body.replace(b'"v":1', b'"v":2'), 7)
    with pytest.raises(EventFormatError, match="entry 3"):
        decode_event(b"garbage", 3)


# -- config --------------------------------------------------------------------------------------
PEERS = "n0-127.0.0.1:9878;n1-127.0.0.1:9868;n2-127.0.0.1:9858"


def test_config_defaults_and_refusals(tmp_path):
    conf = tmp_path / "controller.conf"
    conf.write_text(f"controllerDLegerGroup = group1\ncontrollerDLegerPeers = {PEERS}\ncontrollerDLegerSelfId = n1\n"
                    "heartBeatTimeIntervalMs=200\nsomethingElse=1\n")
    config, unknown = load_controller_config(str(conf))
    assert unknown == ["somethingElse"]
    assert (config.scanInactiveMasterInterval, config.enableElectUncleanMaster, config.notifyBrokerRoleChanged) == \
        (5000, False, True)
    assert config.self_addr == "127.0.0.1:9868" and config.dledger.heartBeatTimeIntervalMs == 200
    assert config.controllerStorePath.endswith("DLedgerController")
    base = {"controllerDLegerGroup": "g", "controllerDLegerPeers": PEERS, "controllerDLegerSelfId": "n0"}
    for key, bad in (("controllerDLegerGroup", ""), ("controllerDLegerSelfId", "n5"),
                     ("controllerDLegerPeers", "n0-127.0.0.1:9878"), ("controllerDLegerPeers", "n0-nohost"),
                     ("scanInactiveMasterInterval", "0"), ("enableElectUncleanMaster", "maybe"),
                     ("controllerType", "jRaft"), ("mappedFileSize", "x")):
        with pytest.raises(StoreConfigError) as e:
            ControllerConfig.from_properties({**base, key: bad})
        assert e.value.key == key, (key, bad, e.value)


# -- three `broker controller` processes -----------------------------------------------------------
def test_three_controllers_register_elect_alter_survive_leader_death_and_fail_over(tmp_path):
    group = ControllerGroup(tmp_path, extra="scanInactiveMasterInterval=300\n").start()
    beats = None
    try:
        leader = group.wait_leader()
        follower = next(i for i in group.ids if i != leader)
        # registration: ids 1..3 handed out in order, the same again on re-register
        for again in (False, True):
            for bid, addr in ADDRS.items():
                r = group.leader_call(codes.CONTROLLER_REGISTER_BROKER,
                                      {"clusterName": "c1", "brokerName": G, "brokerAddress": addr})
                assert (r.code, r.ext["brokerId"]) == (codes.SUCCESS, str(bid)), (again, r, r.remark)
        # a follower refuses a write, naming the leader
        r = group.ask(follower, codes.CONTROLLER_REGISTER_BROKER,
                      {"clusterName": "c1", "brokerName": G, "brokerAddress": "127.0.0.1:1"})
        assert r.code == codes.CONTROLLER_NOT_LEADER
        assert r.ext["controllerLeaderAddress"] == f"127.0.0.1:{group.ports[leader]}" and leader in r.remark
        # bad input is refused with a clear error
        r = group.leader_call(codes.CONTROLLER_REGISTER_BROKER, {"clusterName": "c1", "brokerName": G,
                                                                  "brokerAddress": ADDRS[1], "brokerId": 2})
        assert r.code == codes.CONTROLLER_BROKER_ID_INVALID and "belongs to" in r.remark
        r = group.ask(follower, codes.BROKER_HEARTBEAT, {"clusterName": "c1", "brokerName": G,
                                                          "brokerAddr": ADDRS[1], "brokerId": 2})
        assert r.code == codes.CONTROLLER_BROKER_ID_INVALID and ADDRS[2] in r.remark, r.remark
        r = group.leader_call(codes.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "nope"})
        assert r.code == codes.CONTROLLER_BROKER_METADATA_NOT_EXIST and "nope" in r.remark

        beats = Heartbeats(group, G, ADDRS)
        r = group.leader_call(codes.CONTROLLER_ELECT_MASTER, {"clusterName": "c1", "brokerName": G, "brokerId": 1})
        assert r.code == codes.SUCCESS, r.remark
        assert (r.ext["masterBrokerId"], r.ext["masterAddress"], r.ext["masterEpoch"]) == ("1", ADDRS[1], "1")
        # the SyncStateSet takes live brokers only: every controller has heard each of them
        wait_for(lambda: beats.rounds >= 1, 10, "a round of heartbeats")
        alter = {"brokerName": G, "masterBrokerId": 1, "masterEpoch": 1}
        r = group.leader_call(codes.CONTROLLER_ALTER_SYNC_STATE_SET, alter,
                              msgspec.json.encode({"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1}))
        assert (r.code, r.ext["newSyncStateSetEpoch"]) == (codes.SUCCESS, "2"), r.remark
        r = group.leader_call(codes.CONTROLLER_ALTER_SYNC_STATE_SET, alter,  # a stale epoch
                              msgspec.json.encode({"syncStateSet": [1, 2], "syncStateSetEpoch": 1}))
        assert r.code == codes.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH, r.remark

        def replica_info():
            return group.replica_info(G)
        before = replica_info()
        assert before == {"masterBrokerId": "1", "masterAddress": ADDRS[1], "masterEpoch": "1",
                          "syncStateSet": [1, 2, 3], "syncStateSetEpoch": 2}

        # kill -9 the controller leader: the next one answers the same (nothing lost)
        group.kill9(leader)
        new_leader = group.wait_leader(exclude=leader)
        assert replica_info() == before
        r = group.leader_call(codes.CONTROLLER_GET_SYNC_STATE_DATA, body=msgspec.json.encode([G]))
        table = msgspec.json.decode(bytes(r.body))["replicasInfoTable"][G]
        assert [x["brokerId"] for x in table["inSyncReplicas"]] == [1, 2, 3] and table["masterEpoch"] == 1

        # the master stops heartbeating: a new master from the SyncStateSet, the epochs bumped
        beats.beating.discard(1)
        t0 = time.monotonic()
        after = wait_for(lambda: (i := replica_info())["masterBrokerId"] != "1" and i, 15,
                         "the controller to elect a new master")
        # broker 3 heartbeats the longest log (maxOffset 300): the elect policy prefers it
        assert after == {"masterBrokerId": "3", "masterAddress": ADDRS[3], "masterEpoch": "2",
                         "syncStateSet": [3], "syncStateSetEpoch": 3}
        assert time.monotonic() - t0 < 1.0 + 0.3 + 5  # heartbeat timeout + scan interval + slack
        # the old master, back with its stale epoch, is fenced
        r = group.leader_call(codes.CONTROLLER_ALTER_SYNC_STATE_SET, alter,
                              msgspec.json.encode({"syncStateSet": [1, 3], "syncStateSetEpoch": 3}))
        assert r.code == codes.CONTROLLER_INVALID_MASTER, r.remark

        # the operator's view, asked of any live controller: `broker admin controller`
        asked = next(i for i in group.alive() if i != new_leader)
        out = subprocess.run([sys.executable, "-m", "broker.cli", "admin", "controller", "--controller",
                              f"127.0.0.1:{group.ports[asked]}", "-b", G], capture_output=True, text=True,
                             timeout=60, cwd=str(Path(__file__).parents[1]))
        assert out.returncode == 0, out.stderr
        view = json.loads(out.stdout)
        assert view["controller"]["controllerLeaderAddress"] == f"127.0.0.1:{group.ports[new_leader]}"
        g = view["replicasInfoTable"][G]
        assert (g["masterBrokerId"], g["masterAddress"], g["masterEpoch"], g["syncStateSetEpoch"]) == \
            (3, ADDRS[3], 2, 3)
        assert [x["brokerId"] for x in g["inSyncReplicas"]] == [3]
        assert sorted(x["brokerId"] for x in g["notInSyncReplicas"]) == [1, 2]
        out = subprocess.run([sys.executable, "-m", "broker.cli", "admin", "controller", "--controller",
                              f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60,
                             cwd=str(Path(__file__).parents[1]))
        assert out.returncode == 2 and "cannot reach the controller" in out.stderr
        # the killed controller comes back, replays its log and catches up; it can lead again
        group.start(leader)
        group.kill9(new_leader)
        group.wait_leader(exclude=new_leader)
        assert replica_info() == after
    finally:
        if beats is not None:
            beats.close()
        group.stop()


def test_a_refusal_names_the_leader_or_the_real_reason_when_the_state_still_names_this_member():
    """A controller whose own state still names it the leader (stopping, its term moved on, its
    append refused) says why it cannot act, never "n2 is not the leader; the leader is n2"."""
    from types import SimpleNamespace

    from broker.controller.controller import Controller

    def refusal(leader_id: str, is_leader: bool, why: str = "") -> str:
        peers = {i: SimpleNamespace(addr=f"127.0.0.1:{9870 + n}") for n, i in enumerate(("n0", "n1", "n2"))}
        me = SimpleNamespace(config=SimpleNamespace(controllerDLegerSelfId="n2", dledger=SimpleNamespace(peers=peers)),
                             server=SimpleNamespace(state=SimpleNamespace(self_id="n2", is_leader=is_leader,
                                                                          leader_id=leader_id, term=7)))
        me.leader = lambda: Controller.leader(me)
        return str(Controller._not_leader(me, why))

    assert refusal("n0", False) == "controller n2 is not the leader; the leader is n0 at 127.0.0.1:9870"
    assert refusal("n2", True) == "controller n2 cannot act as the leader: it leads term 7 but has not applied its barrier entry yet"
    assert refusal("n2", False) == "controller n2 cannot act as the leader: it no longer leads (term 7)"
    assert refusal("n2", True, "its append was refused: NOT_LEADER") == \
        "controller n2 cannot act as the leader: its append was refused: NOT_LEADER"
