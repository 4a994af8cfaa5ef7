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
HA_SERVICE = ServiceSpec("ha", "broker.ha.ha_service", Slot.HA_PID)  # a master's: streams the log to slaves
HA_CLIENT = ServiceSpec("ha", "broker.ha.ha_client", Slot.HA_PID)  # a slave's: its log's only writer
CLEAN = ServiceSpec("clean", "broker.services.clean_service", Slot.CLEAN_PID)


def specs_for(is_slave: bool) -> tuple[ServiceSpec, ...]:
    return FLUSH, REPUT, HA_CLIENT if is_slave else HA_SERVICE, CLEAN
