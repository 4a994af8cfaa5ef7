"""Counters exposed on the outbox and the consumer (`.metrics`), and optionally mirrored to
Prometheus: pass a prometheus_client CollectorRegistry and each counter becomes
`<prefix>_<name>_total{group=...}` there. prometheus_client is imported only then, so the library
does not need it."""
from __future__ import annotations

import threading

_shared: dict = {}  # (registry, prefix, name) -> prometheus Counter
_shared_lock = threading.Lock()


class Counters:
    def __init__(self, names: tuple[str, ...], prefix: str, group: str, registry=None):
        self._values = dict.fromkeys(names, 0)
        self._lock = threading.Lock()  # the sync wrappers and hooks may count from other threads
        self._prom = {}
        if registry is not None:
            from prometheus_client import Counter
            for name in names:
                # one Counter per registry and name, shared by every group's objects (a registry
                # refuses a second registration of a name)
                with _shared_lock:
                    c = _shared.get((registry, prefix, name))
                    if c is None:
                        c = _shared[(registry, prefix, name)] = Counter(
                            f"{prefix}_{name}", f"broker.reliable {prefix} {name.replace('_', ' ')}", ["group"],
                            registry=registry)
                self._prom[name] = c.labels(group=group)

    def inc(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._values[name] += n
        prom = self._prom.get(name)
        if prom is not None:
            prom.inc(n)

    def __getitem__(self, name: str) -> int:
        return self._values[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def __repr__(self) -> str:
        return f"Counters({self.snapshot()})"
