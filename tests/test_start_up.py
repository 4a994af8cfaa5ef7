"""What a user sees starting `broker namesrv` and `broker serve` as processes: each start-up line
once (printed on stdout, where operators and tests wait for it, and not logged again on stderr); a
brand-new store says it was created, a store started again that it was recovered; a SIGTERM sent
as soon as the broker's line shows stops it cleanly."""
from __future__ import annotations

from tests.helpers.ha_cluster import Broker, NameServer


def test_a_new_store_is_created_and_a_restarted_one_recovered_each_start_up_line_once(tmp_path):
    ns = NameServer(tmp_path)
    broker = Broker(tmp_path, "b", ns.addr, "ASYNC_MASTER", 0)
    try:
        broker.start()
        assert [line for line in ns.child.lines if "listening on" in line] == [f"name server listening on {ns.addr}"]
        assert "listening on" not in ns.child.stderr_tail(), ns.child.stderr_tail()
        listening = [line for line in broker.child.lines if "listening on" in line]
        assert len(listening) == 1 and listening[0].startswith(
            f"broker broker-a (DefaultCluster) listening on 127.0.0.1:{broker.port}; store {broker.store} "), listening
        broker.stop()  # SIGTERM at once after the line: a clean stop all the same
        assert (broker.child.proc.returncode, broker.child.lines[-1]) == (0, "stopped cleanly"), broker.child.lines
        first = (broker.logs / "stderr.1").read_text()
        assert f"listening on 127.0.0.1:{broker.port}" not in first, first  # not logged a second time
        assert "store[" in first and f"INFO created the store at {broker.store}\n" in first, first
        assert "recovered (" not in first, first

        broker.start()  # the same store, stopped cleanly
        broker.stop()
        assert (broker.child.proc.returncode, broker.child.lines[-1]) == (0, "stopped cleanly"), broker.child.lines
        second = (broker.logs / "stderr.2").read_text()
        assert f"store {broker.store} recovered (clean stop) in " in second, second
        assert "created the store" not in second, second
        assert len([line for line in broker.child.lines if "listening on" in line]) == 1
    finally:
        broker.stop()
        ns.stop()
