"""A group's settings survive its master: slaves and followers copy the master's subscription groups
(RocketMQ's SlaveSynchronize.syncSubscriptionGroupConfig, GET_ALL_SUBSCRIPTIONGROUP_CONFIG), so after
a kill -9 of the master a FIFO group is still FIFO and its retryMaxTimes is still its own, wherever
its consumers read next: the slave (master/slave), the new leader (DLedger), the new master
(controller mode)."""
from __future__ import annotations

import msgspec

from broker.remoting import codes
from tests.conftest import wait_for
from tests.helpers.controller_mode import ControllerModeGroup
from tests.helpers.dledger_cluster import DLedgerGroup
from tests.helpers.ha_cluster import Broker, NameServer, call

GROUP = "FifoGroup"


def _create_group(port: int) -> None:
    body = msgspec.json.encode({"groupName": GROUP, "consumeMessageOrderly": True, "retryMaxTimes": 3})
    r = call(port, codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    assert r.code == codes.SUCCESS, r.remark


def _group_on(port: int) -> dict | None:
    r = call(port, codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert r.code == codes.SUCCESS, r.remark
    return msgspec.json.decode(bytes(r.body))["subscriptionGroupTable"].get(GROUP)


def _has_the_group(port: int) -> bool:
    g = _group_on(port)
    return g is not None and g["consumeMessageOrderly"] is True and g["retryMaxTimes"] == 3


def test_a_slave_keeps_its_masters_groups_after_the_master_is_killed(tmp_path):
    ns = NameServer(tmp_path)
    master = Broker(tmp_path, "master", ns.addr, "SYNC_MASTER", 0).start()
    slave = Broker(tmp_path, "slave", ns.addr, "SLAVE", 1).start()
    try:
        assert _group_on(slave.port) is None
        _create_group(master.port)
        wait_for(lambda: _has_the_group(slave.port), 30, "the slave to copy the group (every 10 s)")
        assert "subscription groups copied from master" in slave.stderr()
        master.kill9()
        assert _has_the_group(slave.port)
        slave.stop()
        slave.start()  # and it was persisted
        assert _has_the_group(slave.port)
    finally:
        slave.stop()
        master.stop()
        ns.stop()


def test_a_new_dledger_leader_keeps_the_groups_of_the_old_one(tmp_path):
    g = DLedgerGroup(tmp_path, extra="flushConsumerOffsetInterval=1000\n").start()
    try:
        leader = g.leader()
        _create_group(leader.port)
        followers = [b for b in g.brokers.values() if b is not leader]
        wait_for(lambda: all(_has_the_group(b.port) for b in followers), 30, "the followers to copy the group")
        leader.kill9()
        new = g.leader(timeout=60)
        assert new is not leader
        assert _has_the_group(new.port)
    finally:
        g.stop()


def test_a_new_controller_mode_master_keeps_the_groups_of_the_old_one(tmp_path):
    g = ControllerModeGroup(tmp_path).start()
    try:
        m = g.master()
        g.wait_in_sync(m, 2)
        _create_group(m.port)
        slave = next(b for b in g.brokers.values() if b is not m)
        wait_for(lambda: _has_the_group(slave.port), 30, "the slave to copy the group")
        m.kill9()
        new = g.master(exclude=m)
        assert new is slave
        assert _has_the_group(new.port)
    finally:
        g.stop()
