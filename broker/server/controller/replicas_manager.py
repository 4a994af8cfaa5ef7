"""ReplicasManager: a broker in controller mode (RocketMQ 5's ReplicasManager with AutoSwitch HA).

The controller, not broker.conf, says who is master of the group. This broker:
- registers with the controller leader (CONTROLLER_REGISTER_BROKER, without an id: the controller
  hands one out per address and gives the same one back after a restart; a RocketMQ 5.1+
  controller refuses that, and the broker applies for an id first, GET_NEXT_BROKER_ID and
  APPLY_BROKER_ID, kept in brokerIdentity) and learns the group's master, masterEpoch and
  SyncStateSet;
- heartbeats to every controller every brokerHeartbeatInterval, each on a connection it keeps
  open, so that a controller sees this process die the moment its socket closes;
- asks to be elected (CONTROLLER_ELECT_MASTER) while the group has no master;
- follows what the controller says, told at once by NOTIFY_BROKER_ROLE_CHANGED and checked every
  syncBrokerMetadataPeriod (CONTROLLER_GET_REPLICA_INFO) in case a notification was lost.

A role switch happens in place (RocketMQ changes a store's role without a restart): the store's
writer is the broker process on a master and the HA process on a slave, so the store stops taking
writes and the HA process leaves its role (`MessageStore.quiesce`), what the switch needs is done
on disk while nothing writes, and the store serves in its new role (`resume`); the service
processes run on, and a switch takes milliseconds (a restart of them took 0.5 s on a quiet
machine and over 3 s on a loaded one). In between:
- to master of epoch E: the epoch file gets <E, log end>, fsynced, before the first write;
- to slave of a master of epoch E: the master's epoch entries are fetched (GET_BROKER_EPOCH_CACHE),
  the point where the two logs diverged is found (epoch_file.truncation_point), and the HA client
  starts from the log's end with a hello naming this broker's id and E; the master streams only to
  slaves of its own epoch. A log that diverged is the one case that still restarts the store: the
  tail past the point is cut on disk and fsynced while it is closed (store.truncation), and its
  start recovers the consume queues from there.

As master it keeps the SyncStateSet (CONTROLLER_ALTER_SYNC_STATE_SET): a slave that caught up with
the log joins, one that disconnects or has not caught up for haMaxTimeSlaveNotCatchup (or is
haMaxGapNotInSync behind) leaves. While a change is in flight puts need the union of the old and
the new set: the controller may already elect from the new one. With fewer members than
minInSyncReplicas puts are refused (IN_SYNC_REPLICAS_NOT_ENOUGH) before anything is stored.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time

import msgspec

from broker.remoting import controller_codes as ccodes
from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.connection import connect
from broker.server.tasks import cancel_and_wait
from broker.store import broker_identity, ha_master_address, paths
from broker.store.epoch_file import EpochEntry, EpochFile, truncation_point
from broker.store.offset_table import Slot, slave_acks
from broker.store.truncation import truncate_commit_log

log = logging.getLogger("broker")


class ControllerUnreachable(Exception):
    pass


class ReplicasManager:
    def __init__(self, broker):
        self.broker = broker
        self.config = broker.config
        self.store = broker.store
        self.scfg = broker.store_config
        self.controllers = [a.strip() for a in self.config.controllerAddr.split(";") if a.strip()]
        self.broker_id: int | None = None
        # the group as the controller last said
        self.master_id: int | None = None
        self.master_addr = ""
        self.master_epoch = 0
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        # what this broker is now: None (no master known, a slave of nobody), "master", "slave"
        self.role: str | None = None
        self.serving_epoch = 0
        self.following = ""
        self.switches = 0
        self._conns: dict[str, object] = {}
        self._leader = ""
        self._tasks: list[asyncio.Task] = []
        self._wake = asyncio.Event()
        self._registered = asyncio.Event()  # the heartbeats start the moment we have an id
        # a switch done: heartbeat now, not a period later. A new master's heartbeat connection
        # then carries the two heartbeats that make the controller treat its closing as the
        # process's death (a switch takes milliseconds: a master killed in its first second
        # would otherwise wait out controllerHeartBeatTimeoutMills)
        self._beat_now = asyncio.Event()
        self._switch_lock = asyncio.Lock()
        self._altering = False
        self._caught_up: dict[int, float] = {}
        self._linked: frozenset[int] = frozenset()
        self._prev_wrote = 0
        self._epoch_start = 0  # where the epoch this broker leads begins in its log
        self._retry_join_at = 0.0
        self._closing = False
        self._register_pending = False
        self._said: str | None = None
        self.last_contact = time.monotonic()  # the last answer from the controller leader

    # -- lifecycle ---------------------------------------------------------------------------------
    def prepare_store(self) -> None:
        """Before the store's first start: a slave of nobody, whatever broker.conf says, until the
        controller names the master; an HA address left from an earlier run is not ours to follow."""
        self.store.set_role("SLAVE")
        self.scfg.haMasterAddress = ""
        self.scfg.controllerMasterEpoch = 0
        try:
            os.unlink(paths.ha_master(self.scfg.storePathRootDir))
        except FileNotFoundError:
            pass

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._heartbeats()), loop.create_task(self._follow()),
                       loop.create_task(self._check_sync_state_set_periodically())]

    async def close(self) -> None:
        """A switch under way finishes first (its store part takes under a second; one still
        waiting for its master to serve gives up): a store stopped half-switched would be left
        closed, or be closed twice."""
        self._closing = True
        async with self._switch_lock:
            await cancel_and_wait(self._tasks)
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    @property
    def addr(self) -> str:
        return self.broker.addr

    def routable(self) -> bool:
        """Whether the name servers should route clients here. A master that has not heard from
        the controller leader for controllerHeartBeatTimeoutMills may have been replaced: it stops
        registering as brokerId 0 (it would take the route back from the new master every
        registerNameServerPeriod); it keeps serving what reaches it, and acknowledges only what
        its SyncStateSet holds."""
        if self.role is None:
            return False
        if self.role == "master":
            if (time.monotonic() - self.last_contact) * 1000 < self.config.controllerHeartBeatTimeoutMills:
                return True
            self._register_pending = True  # registered once the controller answers again
            return False
        return True

    # -- talking to the controllers ------------------------------------------------------------------
    async def _conn(self, addr: str):
        c = self._conns.get(addr)
        if c is None or c.transport is None:
            host, _, port = addr.rpartition(":")
            c = self._conns[addr] = await asyncio.wait_for(connect(host, int(port)), 2)
        return c

    async def _ask(self, code: int, ext: dict, body: bytes = b"") -> RemotingCommand:
        """A request to the controller leader (found by asking around; a follower names it)."""
        tried: list[str] = []
        order = ([self._leader] if self._leader else []) + [a for a in self.controllers if a != self._leader]
        ext = {k: str(v) for k, v in ext.items()}
        for addr in order:
            if addr in tried:
                continue
            for _ in range(2):  # the address a follower names, once
                tried.append(addr)
                try:
                    c = await self._conn(addr)
                    r = await c.request(RemotingCommand.request(code, ext, body), 3)
                except (OSError, asyncio.TimeoutError) as e:
                    self._conns.pop(addr, None)
                    log.debug("controller %s: %s", addr, e)
                    break
                if r.code == ccodes.CONTROLLER_NOT_LEADER:
                    # the leader's own address, followed only if it is one of ours: through a NAT
                    # or a proxy we reach the controllers at the addresses controllerAddr lists
                    nxt = r.ext.get("controllerLeaderAddress")
                    if nxt and nxt not in tried and nxt in self.controllers:
                        addr = nxt
                        continue
                    break
                self._leader = addr
                self.last_contact = time.monotonic()
                return r
        raise ControllerUnreachable(f"no controller leader answered (asked {', '.join(tried) or 'none'})")

    async def _heartbeats(self) -> None:
        """BROKER_HEARTBEAT to every controller, oneway, on kept connections (RocketMQ's
        sendHeartbeatToController); it carries the epoch and log end the controller's elect policy
        ranks candidates by. The first goes the moment this broker has registered, not a period
        later: the controller takes a connection for this broker's heartbeat connection (its
        closing: this process died, elect now) once it carried two heartbeats, and counts a broker
        alive (a slave may join the SyncStateSet) from its first."""
        period = self.config.brokerHeartbeatInterval / 1000
        while True:
            await self._registered.wait()
            if self.broker_id is not None:
                t = self.store.table
                ext = {"clusterName": self.config.brokerClusterName, "brokerName": self.config.brokerName,
                       "brokerAddr": self.addr, "brokerId": str(self.broker_id),
                       "heartbeatTimeoutMills": str(self.config.controllerHeartBeatTimeoutMills),
                       "epoch": str(EpochFile(self.scfg.storePathRootDir).load().last_epoch
                                    if self.role is None else max(self.serving_epoch, 0)),
                       "maxOffset": str(t.load(Slot.WROTE) if t is not None else 0),
                       "electionPriority": str(self.config.brokerElectionPriority)}
                for addr in self.controllers:
                    try:
                        c = await self._conn(addr)
                        c.oneway(RemotingCommand.request(ccodes.BROKER_HEARTBEAT, ext, oneway=True))
                    except (OSError, asyncio.TimeoutError):
                        self._conns.pop(addr, None)
            try:
                await asyncio.wait_for(self._beat_now.wait(), period)  # a heartbeat is a period by nature
            except asyncio.TimeoutError:
                pass
            self._beat_now.clear()

    # -- following the controller ------------------------------------------------------------------
    def notified(self, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED from the controller leader: act on it now."""
        try:
            epoch = cmd.get_int("masterEpoch")
            mid = cmd.ext.get("masterBrokerId")
            body = msgspec.json.decode(bytes(cmd.body)) if len(cmd.body) else {}
            sset = frozenset(int(b) for b in body.get("syncStateSet") or ())
            sset_epoch = int(cmd.ext.get("syncStateSetEpoch") or body.get("syncStateSetEpoch") or 0)
        except (ValueError, TypeError, msgspec.DecodeError, AttributeError) as e:
            log.warning("ignored a malformed NOTIFY_BROKER_ROLE_CHANGED: %s", e)
            return
        self._learn(int(mid) if mid not in (None, "", "null") else None, cmd.ext.get("masterAddress") or "",
                    epoch, sset, sset_epoch)
        self._wake.set()

    def _learn(self, mid: int | None, maddr: str, epoch: int, sset: frozenset[int], sset_epoch: int) -> None:
        if epoch < self.master_epoch:
            return  # an older word than the one we hold
        if epoch > self.master_epoch or sset_epoch >= self.sync_state_set_epoch:
            self.sync_state_set, self.sync_state_set_epoch = sset, sset_epoch
        self.master_id, self.master_addr, self.master_epoch = mid, maddr, epoch
        if self.role == "master" and self.serving_epoch == epoch and not self._altering:
            self._publish_isr(self.sync_state_set)

    def _learn_from(self, r: RemotingCommand) -> None:
        body = msgspec.json.decode(bytes(r.body)) if len(r.body) else {}
        if isinstance(body, list):  # RocketMQ's REGISTER_BROKER answer: the SyncStateSet's ids alone
            body = {"syncStateSet": body}
        mid = r.ext.get("masterBrokerId")
        self._learn(int(mid) if mid not in (None, "", "null") else None, r.ext.get("masterAddress") or "",
                    int(r.ext.get("masterEpoch") or 0), frozenset(int(b) for b in body.get("syncStateSet") or ()),
                    int(r.ext.get("syncStateSetEpoch") or body.get("syncStateSetEpoch") or 0))

    async def _register(self) -> None:
        cluster, name = self.config.brokerClusterName, self.config.brokerName
        ext = {"clusterName": cluster, "brokerName": name, "brokerAddress": self.addr}
        known = broker_identity.read(self.scfg.storePathRootDir, cluster, name)
        if known is not None:  # an id applied for the 5.1 way: register with it
            ext["brokerId"] = known
        r = await self._ask(ccodes.CONTROLLER_REGISTER_BROKER, ext)
        if r.code != ccodes.SUCCESS and known is None:
            # RocketMQ 5.1+ controllers hand out no id on registration: apply for one first
            log.info("the controller refused a registration without an id (%d %s): applying for one "
                     "(GET_NEXT_BROKER_ID, APPLY_BROKER_ID)", r.code, r.remark)
            known = await self._apply_broker_id()
            r = await self._ask(ccodes.CONTROLLER_REGISTER_BROKER, {**ext, "brokerId": known})
        if r.code != ccodes.SUCCESS:
            raise ControllerUnreachable(f"the controller refused the registration: {r.code} {r.remark}")
        self.broker_id = int(r.ext.get("brokerId") or known)
        self.scfg.controllerBrokerId = self.broker_id
        self._registered.set()
        log.info("registered with controller %s: brokerId %d", self._leader, self.broker_id)
        self._learn_from(r)

    async def _apply_broker_id(self) -> int:
        """RocketMQ 5.1's two steps: ask the next free id, apply for it with `address;timestamp`
        (a refusal means another broker took it meanwhile: ask again), record it in brokerIdentity."""
        cluster, name = self.config.brokerClusterName, self.config.brokerName
        for _ in range(5):
            r = await self._ask(ccodes.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": cluster, "brokerName": name})
            if r.code != ccodes.SUCCESS:
                raise ControllerUnreachable(f"the controller refused GET_NEXT_BROKER_ID: {r.code} {r.remark}")
            bid = int(r.ext["nextBrokerId"])
            r = await self._ask(ccodes.CONTROLLER_APPLY_BROKER_ID, {
                "clusterName": cluster, "brokerName": name, "appliedBrokerId": bid,
                "registerCheckCode": f"{self.addr};{int(time.time() * 1000)}"})
            if r.code == ccodes.SUCCESS:
                broker_identity.write(self.scfg.storePathRootDir, cluster, name, bid)
                return bid
            log.info("the controller refused broker id %d: %d %s", bid, r.code, r.remark)
        raise ControllerUnreachable("no broker id could be applied for")

    async def _sync_metadata(self) -> None:
        r = await self._ask(ccodes.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.config.brokerName})
        if r.code == ccodes.SUCCESS:
            self._learn_from(r)

    async def _follow(self) -> None:
        period = self.config.syncBrokerMetadataPeriod / 1000
        while True:
            self._wake.clear()
            try:
                if self.broker_id is None:
                    await self._register()
                else:
                    await self._sync_metadata()
                await self._act()
                if self._register_pending:
                    self._register_pending = False
                    self.broker.register_soon()
                if self._said:
                    log.info("controller reached again")
                self._said = None
            except (ControllerUnreachable, OSError, ValueError, KeyError) as e:
                if self._said != str(e):
                    log.warning("controller mode: %s", e)
                    self._said = str(e)
            except Exception:
                log.exception("controller mode: following the controller failed")
            # woken by a notification, else the periodic check (a lost notification, a retry)
            wait = period if self._said is None and self.role is not None else min(period, 1.0)
            if self.role == "master":
                # a master hears from the controller well within controllerHeartBeatTimeoutMills,
                # or it stops registering as master (routable)
                wait = min(wait, self.config.controllerHeartBeatTimeoutMills / 3000)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _act(self) -> None:
        if self.master_id is None:
            r = await self._ask(ccodes.CONTROLLER_ELECT_MASTER, {
                "clusterName": self.config.brokerClusterName, "brokerName": self.config.brokerName,
                "brokerId": self.broker_id})
            if r.code == ccodes.SUCCESS:
                self._learn_from(r)
            elif r.code != ccodes.CONTROLLER_MASTER_STILL_EXIST:
                log.info("group %s has no master; not elected: %s", self.config.brokerName, r.remark)
        if self.master_id is None:
            if self.role == "master":  # fenced: the group has no master, not us
                await self._switch(None, "")
            return
        if self.master_id == self.broker_id:
            if self.role != "master" or self.serving_epoch != self.master_epoch:
                await self._switch("master", "")
        elif self.role != "slave" or self.serving_epoch != self.master_epoch or self.following != self.master_addr:
            await self._switch("slave", self.master_addr)

    # -- switching -----------------------------------------------------------------------------------
    async def _switch(self, role: str | None, master_addr: str) -> None:
        async with self._switch_lock:
            epoch = self.master_epoch
            t0 = time.monotonic()
            log.info("controller mode: switching to %s at master epoch %d", role or "no role", epoch)
            cache, ha_addr = None, ""
            if role == "slave":
                cache, ha_addr = await self._master_epochs(master_addr, epoch)
            b = self.broker
            b.pause_for_switch()
            log_end = await self.store.quiesce()  # nothing writes the log from here
            ep = EpochFile(self.scfg.storePathRootDir).load()
            store_role = "SYNC_MASTER" if role == "master" else "SLAVE"
            self.scfg.controllerMasterEpoch = epoch if role in ("master", "slave") else 0
            restarted = False
            if role == "slave":
                master_entries = [EpochEntry(e["epoch"], e["startOffset"]) for e in cache["epochList"]]
                cut = truncation_point(ep.entries, log_end, master_entries, int(cache["maxOffset"]))
                if cut is None:
                    log.error("this broker's log and master %s's have no epoch in common (ours %s, its %s): it "
                              "cannot follow; wipe its store to rebuild it from the master", master_addr,
                              ep.entries, master_entries)
                    role = None
                    self.scfg.controllerMasterEpoch = 0
                else:
                    if cut < log_end:
                        # the rare path: the tail is cut while the store is closed, and its start
                        # recovers the consume queues from the cut (the services restart)
                        log.warning("log diverged from master %s's at %d (ours ends at %d): cutting the tail",
                                    master_addr, cut, log_end)
                        await self.store.close()
                        truncate_commit_log(self.scfg, cut)
                        restarted = True
                    ep.replace(master_entries)
            if role == "master":
                ep.append(epoch, log_end, log_end)
                self._epoch_start = ep.entries[-1].startOffset
                self.store.isr_members = self.sync_state_set | {self.broker_id}
                self._caught_up.clear()
                self._linked, self._prev_wrote = frozenset(), log_end
            if restarted:
                ha_master_address.write(self.scfg.storePathRootDir, ha_addr)
                self.store.set_role(store_role)
                await self.store.start()
            else:
                await self.store.resume(store_role, ha_addr if role == "slave" else "")
            self.role, self.serving_epoch = role, epoch
            self.following = master_addr if role == "slave" else ""
            self.switches += 1
            self._publish_isr(self.sync_state_set if role == "master" else frozenset())
            b.resume_after_switch(role, master_addr)
            log.info("controller mode: %s of %s at master epoch %d (switched in %.2f s)", role or "no role",
                     self.config.brokerName, epoch, time.monotonic() - t0)
            self._beat_now.set()
            if role == "master" and self._on_store_wake not in self.store.notifier.listeners:
                self.store.notifier.listeners.append(self._on_store_wake)

    async def _master_epochs(self, master_addr: str, epoch: int) -> tuple[dict, str]:
        """The master's epoch entries, once it serves the epoch the controller named (it may still
        be switching): GET_BROKER_EPOCH_CACHE, asked again until then."""
        host, _, port = master_addr.rpartition(":")
        delay = 0.05
        deadline = time.monotonic() + 30
        foreign = False  # it serves our epoch but names no HA address: not one of our brokers
        while True:
            try:
                c = await asyncio.wait_for(connect(host, int(port)), 2)
                try:
                    r = await c.request(RemotingCommand.request(ccodes.GET_BROKER_EPOCH_CACHE, {}), 3)
                finally:
                    c.close()
                if r.code == codes.SUCCESS:
                    cache = msgspec.json.decode(bytes(r.body))
                    entries = cache.get("epochList") or []
                    if entries and entries[-1]["epoch"] == epoch and r.ext.get("haServerAddr"):
                        return cache, r.ext["haServerAddr"]
                    foreign = bool(entries) and entries[-1]["epoch"] == epoch
                    if entries and entries[-1]["epoch"] > epoch:
                        raise ControllerUnreachable(f"master {master_addr} is at epoch {entries[-1]['epoch']}, "
                                                    f"newer than {epoch}: asking the controller again")
            except (OSError, asyncio.TimeoutError):
                pass
            if time.monotonic() > deadline or epoch != self.master_epoch or self._closing:
                if foreign:
                    # RocketMQ's broker answers GET_BROKER_EPOCH_CACHE without it; its AutoSwitch HA
                    # protocol (HANDSHAKE/TRANSFER frames) is not the hello our HA client opens with
                    raise ControllerUnreachable(
                        f"master {master_addr} serves epoch {epoch} but its GET_BROKER_EPOCH_CACHE answer names no "
                        f"haServerAddr: it is not a broker of this project (a RocketMQ broker speaks the AutoSwitch "
                        f"HA protocol, which this one cannot follow)")
                raise ControllerUnreachable(f"master {master_addr} does not serve epoch {epoch}")
            await asyncio.sleep(delay)  # the master finishes its own switch: no event reaches us from it
            delay = min(delay * 2, 0.5)

    def epoch_cache(self) -> tuple[dict, str]:
        """GET_BROKER_EPOCH_CACHE's answer (RocketMQ's EpochEntryCache), and our HA address while we
        serve as master (a slave connects there)."""
        t = self.store.table
        end = t.load(Slot.WROTE) if t is not None else 0
        ep = EpochFile(self.scfg.storePathRootDir).load()
        body = {"clusterName": self.config.brokerClusterName, "brokerName": self.config.brokerName,
                "brokerId": self.broker_id if self.broker_id is not None else -1,
                "epochList": ep.as_json(end), "maxOffset": end}
        serving = self.role == "master" and self.store.table is not None and not self.store.is_slave
        ha = self.config.haAnnounceAddress or f"{self.scfg.brokerIP1}:{self.scfg.ha_port}"
        return body, (ha if serving else "")

    # -- the SyncStateSet (master) -----------------------------------------------------------------
    def _publish_isr(self, members: frozenset[int]) -> None:
        s = self.store
        if s.table is not None:
            # the reput dispatches only what these slaves acknowledged (RocketMQ 5's confirmOffset)
            # (a store restarting as a slave while `role` still says master takes no bound)
            serving = self.role == "master" and not s.is_slave
            mask = sum(1 << b for b in members - {self.broker_id} if 0 <= b < 63) if serving else 0
            if s.table.load(Slot.ISR_MASK) != mask:
                s.table.store(Slot.ISR_MASK, mask)
                s.table.add(Slot.REPUT_WAKE, 1)
        if self.role == "master":
            members = members | {self.broker_id}
            s.isr_members = members
            if s.group_transfer is not None and hasattr(s.group_transfer, "set_members"):
                s.group_transfer.set_members(members)
            n = len(self.sync_state_set | {self.broker_id})
            s.isr_refusal = (None if n >= self.scfg.minInSyncReplicas else
                             f"in-sync replicas not enough: the SyncStateSet {sorted(self.sync_state_set)} has {n} "
                             f"member(s), minInSyncReplicas is {self.scfg.minInSyncReplicas}")
        else:
            s.isr_refusal = None

    def _on_store_wake(self) -> None:
        """On the master's every eventfd wake (a slave acknowledged, linked or left): note who has
        caught up, and change the set at once when a slave linked, left or caught up."""
        t = self.store.table
        if self.role != "master" or t is None:
            return
        acks = slave_acks(t)
        wrote = t.load(Slot.WROTE)
        now = time.monotonic()
        # RocketMQ's lastCaughtUpTime: the slave holds what this master had written at the
        # previous wake (under a steady load it is never level with the log's moving end)
        for bid, ack in acks.items():
            if ack >= self._prev_wrote:
                self._caught_up[bid] = now
        self._prev_wrote = wrote
        linked = frozenset(acks)
        joining = (any(b not in self.sync_state_set and self._caught_up.get(b) == now for b in linked)
                   and now >= self._retry_join_at)
        if linked != self._linked or joining:
            self._linked = linked
            asyncio.get_running_loop().create_task(self.check_sync_state_set())

    async def _check_sync_state_set_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.checkSyncStateSetPeriod / 1000)  # RocketMQ's periodic check
            await self.check_sync_state_set()

    async def check_sync_state_set(self) -> None:
        if self.role != "master" or self._altering or self.store.table is None:
            return
        t = self.store.table
        acks = slave_acks(t)
        wrote = t.load(Slot.WROTE)
        now = time.monotonic()
        for bid, ack in acks.items():  # an idle master gets no wake from a slave level with it
            if ack >= wrote:
                self._caught_up[bid] = now
        keep = {self.broker_id}
        for b in self.sync_state_set - {self.broker_id}:
            recent = now - self._caught_up.get(b, -1e18) < self.scfg.haMaxTimeSlaveNotCatchup / 1000
            if b in acks and recent and wrote - acks[b] < self.scfg.haMaxGapNotInSync:
                keep.add(b)
        # a slave joins once it has caught up with the log, this epoch's start included
        join = {b for b, ack in acks.items() if b not in self.sync_state_set and ack >= self._epoch_start
                and now - self._caught_up.get(b, -1e18) < 1.0}
        new = frozenset(keep | join)
        if new == self.sync_state_set | {self.broker_id}:
            return
        await self._alter(new)

    async def _alter(self, new: frozenset[int]) -> None:
        old = self.sync_state_set | {self.broker_id}
        self._altering = True
        self._publish_isr(old | new)  # until the controller answers, puts need both sets
        try:
            body = msgspec.json.encode({"syncStateSet": sorted(new), "syncStateSetEpoch": self.sync_state_set_epoch})
            r = await self._ask(ccodes.CONTROLLER_ALTER_SYNC_STATE_SET, {
                "brokerName": self.config.brokerName, "masterBrokerId": self.broker_id,
                "masterEpoch": self.serving_epoch}, body)
            if r.code == ccodes.SUCCESS:
                got = msgspec.json.decode(bytes(r.body))
                self.sync_state_set = frozenset(int(b) for b in got["syncStateSet"])
                self.sync_state_set_epoch = int(got["syncStateSetEpoch"])
                log.info("SyncStateSet of %s is now %s (epoch %d)", self.config.brokerName,
                         sorted(self.sync_state_set), self.sync_state_set_epoch)
            else:
                log.warning("the controller refused the SyncStateSet %s: %d %s", sorted(new), r.code, r.remark)
                # not at every wake again (each slave ack is one): a slave the controller does not
                # count alive yet is asked for again after a pause, or by the periodic check
                self._retry_join_at = time.monotonic() + min(1.0, self.config.checkSyncStateSetPeriod / 1000)
                if r.code in (ccodes.CONTROLLER_FENCED_MASTER_EPOCH, ccodes.CONTROLLER_INVALID_MASTER,
                              ccodes.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH):
                    self._wake.set()  # we may no longer be master: ask the controller
        except (ControllerUnreachable, OSError, ValueError, KeyError) as e:
            log.warning("could not change the SyncStateSet to %s: %s", sorted(new), e)
            self._retry_join_at = time.monotonic() + min(1.0, self.config.checkSyncStateSetPeriod / 1000)
        finally:
            self._altering = False
            self._publish_isr(self.sync_state_set)
