"""Where a store keeps its files (RocketMQ's StorePathConfigHelper), in one place.

    <root>/commitlog/<20-digit offset>           the commit log's segments
    <root>/consumequeue/<topic>/<queueId>/...    consume queues
    <root>/index/<yyyyMMddHHmmssSSS>             the message index (IndexFile)
    <root>/config/topics.json, consumerOffset.json, delayOffset.json
    <root>/checkpoint, abort, lock               as RocketMQ names them
    <root>/runtime/offset_table, ha_master       ours: shared memory and the slave's master address
"""
from __future__ import annotations

import os


def commitlog_dir(root: str) -> str:
    return os.path.join(root, "commitlog")


def consumequeue_dir(root: str) -> str:
    return os.path.join(root, "consumequeue")


def index_dir(root: str) -> str:
    """The message index's files, named by creation time (yyyyMMddHHmmssSSS)."""
    return os.path.join(root, "index")


def config_dir(root: str) -> str:
    return os.path.join(root, "config")


def checkpoint(root: str) -> str:
    return os.path.join(root, "checkpoint")


def abort_file(root: str) -> str:
    """Present while a store runs: found at start, it means the last run did not stop cleanly."""
    return os.path.join(root, "abort")


def epoch_file(root: str) -> str:
    """Controller mode: the epochs this log was written in (RocketMQ 5's epochFileCheckpoint)."""
    return os.path.join(root, "epochFileCheckpoint")


def lock_file(root: str) -> str:
    return os.path.join(root, "lock")


def runtime_dir(root: str) -> str:
    return os.path.join(root, "runtime")


def offset_table(root: str) -> str:
    return os.path.join(runtime_dir(root), "offset_table")


def ha_master(root: str) -> str:
    return os.path.join(runtime_dir(root), "ha_master")


def dledger_dir(root: str, self_id: str) -> str:
    """DLedger's own folder inside the store (RocketMQ sets its storeBaseDir to the store root):
    `currterm`, and later `data/`, `index/` and `checkpoint`."""
    return os.path.join(root, f"dledger-{self_id}")


def dledger_data_dir(root: str, self_id: str) -> str:
    """The entries of DLedger mode's log (RocketMQ records as entry bodies), DLedger's `data/`."""
    return os.path.join(dledger_dir(root, self_id), "data")


def dledger_data_dirs(root: str) -> list[str]:
    """Every member's `dledger-<selfId>/data` under the store root (whatever dLegerSelfId is now)."""
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [os.path.join(root, n, "data") for n in names
            if n.startswith("dledger-") and os.path.isdir(os.path.join(root, n, "data"))]
