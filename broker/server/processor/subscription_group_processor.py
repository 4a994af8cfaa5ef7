"""The subscription group requests of RocketMQ's AdminBrokerProcessor (codes as RequestCode):
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200, body: a SubscriptionGroupConfig), GET_ALL_SUBSCRIPTIONGROUP_CONFIG
(201, body: the SubscriptionGroupWrapper), DELETE_SUBSCRIPTIONGROUP (207, header groupName) and
GET_SUBSCRIPTIONGROUP_CONFIG (352, header group; the one the 5.x proxy asks)."""
from __future__ import annotations

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import ext_string
from broker.remoting.refusals import BadRequest
from broker.store.subscription_group_table import validate


class SubscriptionGroupProcessor:
    def __init__(self, groups):
        self.groups = groups  # SubscriptionGroupManager

    def handlers(self) -> dict:
        return {codes.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update,
                codes.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.get_all,
                codes.DELETE_SUBSCRIPTIONGROUP: self.delete,
                codes.GET_SUBSCRIPTIONGROUP_CONFIG: self.get_one}

    def update(self, cmd: RemotingCommand, conn):
        try:
            fields = msgspec.json.decode(bytes(cmd.body or b""))
        except msgspec.DecodeError as e:
            raise BadRequest(f"the body is not a SubscriptionGroupConfig JSON object: {e}") from None
        try:
            cfg = validate(fields)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        self.groups.update(fields, cfg)
        return self._answered_when_written(cmd)

    async def _answered_when_written(self, cmd):
        await self.groups.table.written()
        return cmd.response(codes.SUCCESS)

    def get_all(self, cmd: RemotingCommand, conn):
        """SubscriptionGroupWrapper as RocketMQ 5 sends it: each group with its 5.x fields, the
        (empty: no group is forbidden any topic here) forbiddenTable, and the count in the header."""
        wrapper = self.groups.serialize_wrapper()
        table = {name: as_java(cfg) for name, cfg in wrapper.get("subscriptionGroupTable", {}).items()}
        body = {**wrapper, "subscriptionGroupTable": table, "forbiddenTable": {}}
        return cmd.response(codes.SUCCESS, {"totalGroupNum": len(table)}, body=msgspec.json.encode(body))

    def get_one(self, cmd: RemotingCommand, conn):
        group = _field(cmd, "group")
        cfg = self.groups.get(group)
        if cfg is None:
            return cmd.response(codes.SUBSCRIPTION_GROUP_NOT_EXIST, remark=f"No group {group} in this broker")
        return cmd.response(codes.SUCCESS, body=msgspec.json.encode(as_java(vars(cfg))))

    def delete(self, cmd: RemotingCommand, conn):
        group = _field(cmd, "groupName")
        self.groups.delete(group)  # RocketMQ answers SUCCESS for a group it did not have
        return self._answered_when_written(cmd)


def as_java(cfg: dict) -> dict:
    """A group's config with RocketMQ 5's fields this broker does not use at their defaults:
    no attributes, and the retry policy a group has unless told otherwise (the delay levels)."""
    return {"attributes": {}, "groupRetryPolicy": {"type": "CUSTOMIZED"}, **cfg}


def _field(cmd: RemotingCommand, name: str) -> str:
    value = (cmd.ext or {}).get(name)
    if not value:
        raise BadRequest(f"the request has no {name}")
    return ext_string(value)
