"""ControllerRequestProcessor: the controller's remoting front, with RocketMQ 5's request codes,
header fields and bodies (remoting/protocol/header/controller/*, body/SyncStateSet,
body/BrokerReplicasInfo).

It answers on the controller's DLedger peer port (RocketMQ registers its processor on the DLedger
server's remoting server). A refused request is answered with its ControllerError's code and a
remark saying why; CONTROLLER_NOT_LEADER carries the leader's address in the remark and in the
extFields `controllerLeaderId` / `controllerLeaderAddress` so a client can go there at once.

CONTROLLER_REGISTER_BROKER without a brokerId is RocketMQ 5.0's registration (the controller hands
out the id for the address, and answers it in `brokerId`); with one it is 5.1's (the id must be
the address's). GET_NEXT_BROKER_ID and APPLY_BROKER_ID are 5.1's two-step id application;
registerCheckCode is `address;timestamp`, of which the address is what binds the id.
"""
from __future__ import annotations

import logging

import msgspec

from broker.controller import codes
from broker.controller.controller import Controller, ControllerNotLeader
from broker.controller.replicas_info import ControllerError, SyncStateInfo
from broker.remoting.command import CommandError, RemotingCommand

log = logging.getLogger("controller")

_json = msgspec.json.encode


def _sync_state_body(st: SyncStateInfo) -> bytes:
    return _json({"syncStateSet": sorted(st.syncStateSet), "syncStateSetEpoch": st.syncStateSetEpoch})


def _opt_int(cmd: RemotingCommand, key: str) -> int | None:
    v = cmd.ext.get(key)
    if v is None or v == "" or v == "null":
        return None
    return cmd.get_int(key)


class ControllerRequestProcessor:
    def __init__(self, controller: Controller):
        self.controller = controller
        self.handlers = {
            codes.CONTROLLER_REGISTER_BROKER: self.register_broker,
            codes.CONTROLLER_GET_NEXT_BROKER_ID: self.get_next_broker_id,
            codes.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id,
            codes.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            codes.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            codes.CONTROLLER_ELECT_MASTER: self.elect_master,
            codes.BROKER_HEARTBEAT: self.broker_heartbeat,
            codes.CONTROLLER_GET_METADATA_INFO: self.get_metadata_info,
            codes.CONTROLLER_GET_SYNC_STATE_DATA: self.get_sync_state_data,
            codes.CLEAN_BROKER_DATA: self.clean_broker_data,
        }
        controller.server.remoting.other = self.handle
        controller.server.remoting.server.on_close.append(controller.on_channel_close)

    def handle(self, cmd: RemotingCommand, conn):
        fn = self.handlers.get(cmd.code)
        if fn is None:
            return None if cmd.is_oneway else cmd.response(3, remark=f" request type {cmd.code} not supported")
        try:
            # everything is read from the request here, synchronously: its body is a view over the
            # connection's buffer, reused once this call returns
            work = self.broker_heartbeat(cmd, conn) if cmd.code == codes.BROKER_HEARTBEAT else fn(cmd)
        except CommandError as e:
            return None if cmd.is_oneway else cmd.response(codes.CONTROLLER_INVALID_REQUEST, remark=str(e))
        except ControllerError as e:
            return None if cmd.is_oneway else self._refusal(cmd, e)
        if isinstance(work, RemotingCommand) or work is None:
            return None if cmd.is_oneway else work
        return self._finish(cmd, work)

    async def _finish(self, cmd: RemotingCommand, work):
        try:
            res = await work
        except ControllerError as e:
            res = self._refusal(cmd, e)
        return None if cmd.is_oneway else res

    def _refusal(self, cmd: RemotingCommand, e: ControllerError) -> RemotingCommand:
        ext = {}
        if isinstance(e, ControllerNotLeader):
            ext = {k: v for k, v in (("controllerLeaderId", e.leader_id), ("controllerLeaderAddress", e.leader_addr))
                   if v}
        else:
            log.info("refused request %d: %s", cmd.code, e)
        return cmd.response(e.code, ext, remark=str(e))

    def _master_fields(self, name: str) -> dict:
        st = self.controller.replicas.sync_states[name]
        ext = {"masterEpoch": st.masterEpoch, "syncStateSetEpoch": st.syncStateSetEpoch}
        if st.masterBrokerId is not None:
            ext["masterBrokerId"] = st.masterBrokerId
            ext["masterAddress"] = self.controller.replicas.master_address(name) or ""
        return ext

    # -- registration ----------------------------------------------------------------------------
    def register_broker(self, cmd: RemotingCommand):
        cluster, name = cmd.get_str("clusterName"), cmd.get_str("brokerName")
        address, broker_id = cmd.get_str("brokerAddress"), _opt_int(cmd, "brokerId")

        async def run():
            c = self.controller
            if broker_id is None or broker_id < 0:
                bid = await c.apply_broker_id(cluster, name, address)
            else:
                await c.read()
                c.replicas.check_owner(name, broker_id, address)
                bid = broker_id
            return cmd.response(codes.SUCCESS, {"clusterName": cluster, "brokerName": name, "brokerId": bid,
                                                **self._master_fields(name)},
                                body=_sync_state_body(c.replicas.sync_states[name]))
        return run()

    def get_next_broker_id(self, cmd: RemotingCommand):
        cluster, name = cmd.get_str("clusterName"), cmd.get_str("brokerName")

        async def run():
            await self.controller.read()
            return cmd.response(codes.SUCCESS, {"clusterName": cluster, "brokerName": name,
                                                "nextBrokerId": self.controller.replicas.next_broker_id(name)})
        return run()

    def apply_broker_id(self, cmd: RemotingCommand):
        cluster, name = cmd.get_str("clusterName"), cmd.get_str("brokerName")
        applied = cmd.get_int("appliedBrokerId")
        address = cmd.get_str("registerCheckCode").split(";", 1)[0]

        async def run():
            await self.controller.apply_broker_id(cluster, name, address, applied)
            return cmd.response(codes.SUCCESS, {"clusterName": cluster, "brokerName": name})
        return run()

    # -- replicas --------------------------------------------------------------------------------
    def get_replica_info(self, cmd: RemotingCommand):
        name = cmd.get_str("brokerName")

        async def run():
            c = self.controller
            await c.read()
            c.replicas.group(name)
            return cmd.response(codes.SUCCESS, self._master_fields(name),
                                body=_sync_state_body(c.replicas.sync_states[name]))
        return run()

    def alter_sync_state_set(self, cmd: RemotingCommand):
        name = cmd.get_str("brokerName")
        master_id, master_epoch = cmd.get_int("masterBrokerId"), cmd.get_int("masterEpoch")
        try:
            body = msgspec.json.decode(bytes(cmd.body))
            new_set = {int(b) for b in body["syncStateSet"]}
            set_epoch = int(body["syncStateSetEpoch"])
        except (msgspec.DecodeError, KeyError, TypeError, ValueError) as e:
            raise CommandError(f"the body is not a SyncStateSet (syncStateSet, syncStateSetEpoch): {e!r}") from None

        async def run():
            st = await self.controller.alter_sync_state_set(name, master_id, master_epoch, new_set, set_epoch)
            return cmd.response(codes.SUCCESS, {"newSyncStateSetEpoch": st.syncStateSetEpoch},
                                body=_sync_state_body(st))
        return run()

    def elect_master(self, cmd: RemotingCommand):
        name = cmd.get_str("brokerName")
        broker_id = _opt_int(cmd, "brokerId")
        designate = cmd.get_bool("designateElect")

        async def run():
            st = await self.controller.elect_master(name, -1 if broker_id is None else broker_id, designate)
            return cmd.response(codes.SUCCESS, self._master_fields(name),
                                body=_json({"syncStateSet": sorted(st.syncStateSet)}))
        return run()

    def broker_heartbeat(self, cmd: RemotingCommand, conn=None):
        self.controller.heartbeat(
            cmd.get_str("brokerName"), _opt_int(cmd, "brokerId"), cmd.get_str("brokerAddr"),
            _opt_int(cmd, "heartbeatTimeoutMills"), _opt_int(cmd, "epoch") or 0, _opt_int(cmd, "maxOffset") or 0,
            _opt_int(cmd, "confirmOffset") or 0, _opt_int(cmd, "electionPriority"), conn)
        return cmd.response(codes.SUCCESS)

    def clean_broker_data(self, cmd: RemotingCommand):
        name = cmd.get_str("brokerName")
        ids_text = cmd.get_str("brokerControllerIdsToClean", "")
        try:
            ids = [int(x) for x in ids_text.split(";") if x.strip()] or None
        except ValueError:
            raise CommandError(f"brokerControllerIdsToClean {ids_text!r} is not ids separated by ';'") from None
        clean_living = cmd.get_bool("isCleanLivingBroker")

        async def run():
            await self.controller.clean_broker_data(name, ids, clean_living)
            return cmd.response(codes.SUCCESS)
        return run()

    # -- the controllers -------------------------------------------------------------------------
    def get_metadata_info(self, cmd: RemotingCommand):
        c = self.controller
        lid, addr = c.leader()
        ext = {"group": c.config.controllerDLegerGroup, "isLeader": c.server.is_leader,
               "peers": c.config.controllerDLegerPeers}
        if lid:
            ext["controllerLeaderId"] = lid
        if addr:
            ext["controllerLeaderAddress"] = addr
        return cmd.response(codes.SUCCESS, ext)

    def get_sync_state_data(self, cmd: RemotingCommand):
        try:
            names = msgspec.json.decode(bytes(cmd.body)) if len(cmd.body) else None
        except msgspec.DecodeError as e:
            raise CommandError(f"the body is not a JSON list of broker names: {e}") from None
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise CommandError("the body is not a JSON list of broker names")

        async def run():
            c = self.controller
            await c.read()
            table = {}
            for name in (names if names is not None else sorted(c.replicas.replicas)):
                if name not in c.replicas.replicas:
                    continue
                info, st = c.replicas.group(name)

                def ident(bid: int) -> dict:
                    return {"brokerName": name, "brokerId": bid, "brokerAddress": info.brokerIdInfo[bid],
                            "alive": c.heartbeats.is_alive(name, bid)}
                table[name] = {
                    "masterBrokerId": st.masterBrokerId, "masterAddress": c.replicas.master_address(name),
                    "masterEpoch": st.masterEpoch, "syncStateSetEpoch": st.syncStateSetEpoch,
                    "inSyncReplicas": [ident(b) for b in sorted(st.syncStateSet) if b in info.brokerIdInfo],
                    "notInSyncReplicas": [ident(b) for b in sorted(info.brokerIdInfo) if b not in st.syncStateSet]}
            return cmd.response(codes.SUCCESS, body=_json({"replicasInfoTable": table}))
        return run()
