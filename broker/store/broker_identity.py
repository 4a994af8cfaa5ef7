"""`{storePathRootDir}/brokerIdentity`: the broker id a controller gave this broker through RocketMQ
5.1's two-step application (GET_NEXT_BROKER_ID, APPLY_BROKER_ID), in RocketMQ's own format
(`clusterName#brokerName#brokerId`, store/ha/autoswitch/BrokerMetadata), so that a restart
registers with the same id. Written atomically and fsynced before the id is used."""
from __future__ import annotations

import os

from broker.store.durable import fsync_dir

NAME = "brokerIdentity"


def read(root: str, cluster: str, name: str) -> int | None:
    """The id recorded for this cluster and broker name; None if there is none (or it names another
    group: a store reused for another broker name gets a new id)."""
    try:
        with open(os.path.join(root, NAME)) as f:
            parts = f.read().strip().split("#")
    except FileNotFoundError:
        return None
    if len(parts) != 3 or parts[:2] != [cluster, name]:
        return None
    try:
        return int(parts[2])
    except ValueError:
        return None


def write(root: str, cluster: str, name: str, broker_id: int) -> None:
    path = os.path.join(root, NAME)
    os.makedirs(root, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{cluster}#{name}#{broker_id}")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(root)
