"""Reads RocketMQ's broker.conf (a Java .properties file) into a MessageStoreConfig.

Known store keys are validated (a bad value refuses to start, naming the key); keys that belong
to parts of the broker not built yet, and unknown keys, are reported so nothing is silently ignored.
"""
from __future__ import annotations

import logging

from broker.store.config import MessageStoreConfig

log = logging.getLogger("conf")

# broker.conf keys that RocketMQ operators set and that other parts of this broker read.
BROKER_KEYS = {
    "brokerClusterName", "brokerName", "brokerId", "namesrvAddr", "autoCreateTopicEnable",
    "defaultTopicQueueNums", "aclEnable", "haListenPort", "haMasterAddress", "fileReservedTime",
    "deleteWhen", "diskMaxUsedSpaceRatio", "brokerIP2", "slaveReadEnable", "sendMessageThreadPoolNums",
}


def read_properties(path: str) -> dict[str, str]:
    """Java .properties: `key=value`, `key: value` or `key value`; `#`/`!` comments; `\\` continues a line."""
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#!":
            continue
        cut = min((p for p in (line.find("="), line.find(":"), line.find(" ")) if p >= 0), default=-1)
        if cut < 0:
            props[line] = ""
            continue
        key, value = line[:cut].strip(), line[cut + 1:].strip()
        props[key] = value.lstrip("=: ").strip() if line[cut] == " " else value
    return props


def load_store_config(path: str | None, overrides: dict[str, str] | None = None) -> MessageStoreConfig:
    props = read_properties(path) if path else {}
    props.update(overrides or {})
    config, unknown = MessageStoreConfig.from_properties(props)
    for key in unknown:
        if key in BROKER_KEYS:
            log.info("%s: read by the broker daemon, not by the store", key)
        else:
            log.warning("%s: unknown key in %s, ignored", key, path)
    return config
