"""The store's service processes: what each is called, which module runs it, and the slot in
which it publishes its pid once it is ready (after installing its signal handlers)."""
from __future__ import annotations

from dataclasses import dataclass

from broker.store.offset_table import Slot


@dataclass(frozen=True)
class ServiceSpec:
    name: str
    module: str
    pid_slot: Slot


FLUSH = ServiceSpec("flush", "broker.services.flush_service", Slot.FLUSH_PID)
REPUT = ServiceSpec("reput", "broker.services.reput_service", Slot.REPUT_PID)
# a master's streams the log to slaves, a slave's is its log's only writer; one process, whose role
# follows Slot.HA_ROLE (a controller-mode switch does not restart it)
HA = ServiceSpec("ha", "broker.ha.ha_process", Slot.HA_PID)
CLEAN = ServiceSpec("clean", "broker.services.clean_service", Slot.CLEAN_PID)


SPECS = (FLUSH, REPUT, HA, CLEAN)  # every role runs the same ones
