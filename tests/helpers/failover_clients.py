"""The unmodified npm client (ali-ons) across a master's death, for every mode that fails over
(DLedger, controller): the same check, the mode's own kill."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

from tests.helpers.real_clients import Consumer, produce


def ali_ons_across_a_master_kill(namesrv: str, tmp_path, kill_master: Callable[[], object], topic: str = "TONS"):
    """A push consumer running across the kill gets every message a producer had acknowledged
    before it and every one a new producer has acknowledged after it, once its routes move to the
    new master (ali-ons refreshes them every 30 s). `kill_master()` kills the master and returns
    the new one once the name server routes to it; it is returned here."""
    cluster = SimpleNamespace(namesrv=namesrv)
    before = produce("ons", cluster, topic, [{"body": f"before-{i}"} for i in range(30)], tmp_path)
    assert [r.get("status") for r in before] == ["SEND_OK"] * 30, before
    with Consumer("ons", cluster, tmp_path, topic, "cg-ons", "ons-c1") as consumer:
        consumer.wait(lambda got: {m["body"] for m in got} >= {f"before-{i}" for i in range(30)}, 60,
                      "the messages sent before the kill")
        new = kill_master()
        after = produce("ons", cluster, topic, [{"body": f"after-{i}"} for i in range(30)], tmp_path)
        acked = {f"after-{i}" for i, r in enumerate(after) if r.get("status") == "SEND_OK"}
        assert len(acked) == 30, after  # a fresh producer asks the name server: the new master
        got = consumer.wait(lambda got: {m["body"] for m in got} >= acked, 120,
                            "the messages sent to the new master")
    assert {m["body"] for m in got} <= {f"before-{i}" for i in range(30)} | acked
    assert all(m["queueOffset"] >= 0 for m in got)
    return new
