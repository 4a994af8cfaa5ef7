"""DLedgerRoleChangeHandler: the broker's role follows its DLedger member's (RocketMQ's
DLedgerRoleChangeHandler, with Raft's no-op added).

- Follower or candidate: a slave at once (writes refused from the elector's call on), brokerId
  selfId's number + 1 as RocketMQ's DLedgerCommitLog.getId gives it.
- Leader: first an entry of the new term with an empty body. Raft commits an earlier term's
  entries only under an entry of the current one, and DLedger 0.3.1.2 appends none of its own,
  so without it a leader elected over an uncommitted tail would wait for the first send to
  commit it (RocketMQ's handler waits for ledger end == committed and would wait forever). Then,
  as RocketMQ: until the committed index is the ledger end and the reput has dispatched
  everything, then the queue table is read again from the consume queues, and only then the
  broker serves writes as master (brokerId 0, SYNC_MASTER: every put waits for its quorum).

Every switch between slave and master is announced to `listeners` (the controller re-registers
with the name servers at once, so clients' routes move). A takeover still under way when the
member stops leading is cancelled by the next role change.
"""
from __future__ import annotations

import asyncio
import logging

from broker.raft.append_errors import AppendError
from broker.raft.protocol import Role

log = logging.getLogger("dledger")


class DLedgerRoleChangeHandler:
    def __init__(self, store, server):
        self.store = store      # the DLedgerMessageStore
        self.server = server    # its DLedgerServer
        self.listeners: list = []  # fn(master: bool), after each switch
        self._task: asyncio.Task | None = None
        self.switches = 0

    def on_role_change(self, term: int, role: Role) -> None:
        """The elector's handler: called on the loop, synchronously, at every change of role."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if role is Role.LEADER:
            self._become_slave(f"leader of term {term}, catching up")  # until the takeover is done
            self._task = asyncio.ensure_future(self._take_over(term))
        else:
            self._become_slave(f"{role.value} in term {term}")

    def _leads(self, term: int) -> bool:
        st = self.server.state
        return st.is_leader and st.term == term

    async def _take_over(self, term: int) -> None:
        server, store = self.server, self.store
        try:
            index, _, ack = server.begin_append(b"")
        except AppendError as e:  # deposed in between: the next role change says what we are
            log.warning("dledger: no no-op entry for term %d: %s", term, e)
            return
        # its outcome is the committed index's to tell (a timeout does not end the takeover)
        ack.add_done_callback(lambda f: f.cancelled() or f.exception())
        # no timeouts here: the next role change cancels a takeover that cannot finish
        await server.wait_committed(index)
        while self._leads(term) and server.store.committed_index < server.store.ledger_end_index:
            await server.wait_committed(server.store.ledger_end_index)
        await store.wait_dispatched(store.commit_log.committed_pos)
        if not self._leads(term):
            return
        store.commit_log.reset_queue_table()
        self._task = None
        log.info("dledger: %s leads term %d; committed index %d dispatched, serving writes as master",
                 server.self_id, term, server.store.committed_index)
        self._switch(True)

    def _become_slave(self, why: str) -> None:
        if not self.store.is_slave:
            log.info("dledger: %s is %s: serving reads as slave", self.server.self_id, why)
            self._switch(False)

    def _switch(self, master: bool) -> None:
        self.store.set_master(master)
        self.switches += 1
        for fn in self.listeners:
            try:
                fn(master)
            except Exception:  # a listener's bug must not stop the others nor the elector
                log.exception("dledger role listener failed")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
