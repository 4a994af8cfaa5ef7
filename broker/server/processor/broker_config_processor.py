"""AdminBrokerProcessor's GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG (mqadmin getBrokerConfig,
updateBrokerConfig): the broker's keys as Java properties text.

RocketMQ's Configuration sets any key it knows by reflection, whether or not the broker reads it
again; here only keys the running broker reads again are changed, and any other key is refused
naming it, so that an operator is never told a change took effect when it waits for a restart."""
from __future__ import annotations

import dataclasses
import json
import time

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.refusals import BadRequest, NoPermission
from broker.store.config import _convert

# RocketMQ's BrokerConfig.configBlackList default: keys naming files and paths are never set remotely
BLACK_LIST = {"brokerConfigPath", "rocketmqHome", "configBlackList", "storePathRootDir", "storePathCommitLog",
              "aclFile", "tlsKeyPath", "tlsCertPath"}


def java_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)


def parse_properties(text: str) -> dict[str, str]:
    """MixAll.string2Properties: `key=value` lines; `#` and `!` comments; blank lines skipped."""
    props = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            key, _, value = line.partition(":")
        props[key.strip()] = value.strip()
    return props


class BrokerConfigProcessor:
    def __init__(self, config, store_config, topics, groups):
        self.config = config  # BrokerConfig
        self.store_config = store_config  # MessageStoreConfig
        self.version = {"counter": 0, "timestamp": 0}
        # key -> what applies it to the running broker beside the config object itself
        self.runtime = {"autoCreateTopicEnable": lambda v: setattr(topics, "auto_create", v),
                        "autoCreateSubscriptionGroup": lambda v: setattr(groups, "auto_create", v)}

    def handlers(self) -> dict:
        return {codes.GET_BROKER_CONFIG: self.get, codes.UPDATE_BROKER_CONFIG: self.update}

    def _items(self):
        for obj in (self.config, self.store_config):
            for f in dataclasses.fields(obj):
                yield obj, f

    def get(self, cmd: RemotingCommand, conn):
        """Configuration.getAllConfigsFormatString: every key=value, a line each; the header carries
        the configuration's DataVersion as JSON."""
        text = "".join(f"{f.name}={java_value(getattr(obj, f.name))}\n" for obj, f in self._items())
        return cmd.response(codes.SUCCESS, {"version": json.dumps(self.version, separators=(",", ":"))},
                            body=text.encode())

    def update(self, cmd: RemotingCommand, conn):
        try:
            props = parse_properties(bytes(cmd.body or b"").decode("utf-8"))
        except UnicodeDecodeError as e:
            raise BadRequest(f"the body is not UTF-8 properties text: {e}") from None
        if any(k in BLACK_LIST for k in props):
            raise NoPermission("Can not update config in black list.")
        fields = {f.name: (obj, f) for obj, f in self._items()}
        unknown = sorted(k for k in props if k not in fields)
        if unknown:
            raise BadRequest(f"unknown broker config key(s): {', '.join(unknown)}")
        static = sorted(k for k in props if k not in self.runtime)
        if static:
            raise BadRequest(f"{', '.join(static)}: read only when the broker starts; set it in broker.conf "
                             f"and restart (keys changed at run time: {', '.join(sorted(self.runtime))})")
        values = {k: _convert(k, v, fields[k][1].type) for k, v in props.items()}  # all checked before any is set
        for k, v in values.items():
            setattr(fields[k][0], k, v)
            self.runtime[k](v)
        if values:
            self.version = {"counter": self.version["counter"] + 1, "timestamp": int(time.time() * 1000)}
        return cmd.response(codes.SUCCESS)

