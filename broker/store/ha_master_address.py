"""Where a slave's HA client finds its master: `haMasterAddress` from broker.conf, else the
address the name server answered the broker's registration with, which the broker writes to
runtime/ha_master and announces by bumping Slot.HA_MASTER (the HA client waits on that word)."""
from __future__ import annotations

import os

from broker.store import paths


def path(store_root: str) -> str:
    return paths.ha_master(store_root)


def write(store_root: str, addr: str) -> bool:
    """Record the master's HA address; False if it is what we already had."""
    p = path(store_root)
    try:
        with open(p) as f:
            if f.read().strip() == addr:
                return False
    except FileNotFoundError:
        pass
    tmp = p + ".tmp"
    with open(tmp, "w") as f:
        f.write(addr + "\n")
    os.replace(tmp, p)  # the HA client never reads half an address
    return True


def read(store_root: str, configured: str = "") -> tuple[str, int] | None:
    text = configured
    if not text:
        try:
            with open(path(store_root)) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host, int(port)
