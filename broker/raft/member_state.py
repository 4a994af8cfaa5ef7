"""MemberState: one member's view of its Raft group (DLedger's MemberState).

Role, current term, the id voted for in it, the leader known in it, and the ledger's end (index
and term of the last entry). The term and the vote live in `dledger-<selfId>/currterm` as Java
properties (`currTerm`, `voteLeader`, and our `ledTerm`: the last term this member led), as DLedger
keeps them, and are made durable (temp file, fsync, rename, directory fsync) before the call that
changed them returns: an answer that
depends on them (an ACCEPT, a new term's votes) is only sent after that, so a member that
crashes and restarts never votes twice in one term. DLedger writes the file without fsync.

A higher term seen from a peer is not adopted at once: as in DLedger, the member becomes a
candidate and remembers the term (`known_max_term`); `next_term` then jumps to it. Nothing here
does I/O but the term file, and nothing here is async: the elector calls it on its event loop.
"""
from __future__ import annotations

import logging
import os

from broker.raft.config import DLedgerConfig
from broker.raft.protocol import Role
from broker.store import paths
from broker.store.config_files import write_atomic
from broker.store.errors import CorruptStoreError

log = logging.getLogger("raft")

TERM_FILE = "currterm"
KEY_TERM = "currTerm"
KEY_VOTE_FOR = "voteLeader"
# Our addition to DLedger's file (its reader ignores other keys): the last term this member led,
# written before it appends anything as that term's leader. A member that led its persisted term
# stands in the next one after a restart (broker.raft.elector.LeaderElector.start).
KEY_LED_TERM = "ledTerm"


class IllegalState(RuntimeError):
    """A role change the state machine does not allow (DLedger's ILLEGAL_MEMBER_STATE): a bug."""


def read_properties(text: str) -> dict[str, str]:
    """java.util.Properties' line format, as far as DLedger writes it: `#` comments, key=value."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


class MemberState:
    def __init__(self, config: DLedgerConfig, store_root: str):
        self.config = config
        self.group = config.dLegerGroup
        self.self_id = config.dLegerSelfId
        self.peers = config.peers
        self.dir = paths.dledger_dir(store_root, self.self_id)
        self.term_path = os.path.join(self.dir, TERM_FILE)
        self.role = Role.CANDIDATE
        self.leader_id: str | None = None
        self.term = 0
        self.vote_for: str | None = None
        self.led_term = -1
        self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.known_max_term = -1
        os.makedirs(self.dir, exist_ok=True)
        self._load_term()

    # -- the term file ---------------------------------------------------------------------------
    def _load_term(self) -> None:
        for path in (self.term_path, self.term_path + ".bak"):
            try:
                with open(path, encoding="utf-8") as f:
                    props = read_properties(f.read())
            except FileNotFoundError:
                continue
            try:
                self.term = int(props.get(KEY_TERM, "0"))
            except ValueError:
                raise CorruptStoreError(path, 0, f"{KEY_TERM}={props[KEY_TERM]!r} is not a number") from None
            self.vote_for = props.get(KEY_VOTE_FOR) or None
            try:
                self.led_term = int(props.get(KEY_LED_TERM, "-1") or "-1")
            except ValueError:
                raise CorruptStoreError(path, 0, f"{KEY_LED_TERM}={props[KEY_LED_TERM]!r} is not a number") from None
            return

    def _persist(self) -> None:
        led = f"{KEY_LED_TERM}={self.led_term}\n" if self.led_term >= 0 else ""  # DLedger's file until it leads
        write_atomic(self.term_path, f"#{self.self_id}\n{KEY_TERM}={self.term}\n{KEY_VOTE_FOR}={self.vote_for or ''}\n"
                                     f"{led}")

    # -- queries ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.peers)

    def is_quorum(self, n: int) -> bool:
        return n >= self.size // 2 + 1

    def is_peer(self, peer_id: str | None) -> bool:
        return peer_id is not None and peer_id in self.peers

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def is_follower(self) -> bool:
        return self.role is Role.FOLLOWER

    @property
    def is_candidate(self) -> bool:
        return self.role is Role.CANDIDATE

    # -- changes ---------------------------------------------------------------------------------
    def set_vote_for(self, peer_id: str) -> None:
        self.vote_for = peer_id
        self._persist()

    def next_term(self) -> int:
        """A candidate's new term: the highest term heard of, or one past its own; the vote is cleared."""
        if self.role is not Role.CANDIDATE:
            raise IllegalState(f"{self.self_id}: next_term as {self.role.value}")
        self.term = self.known_max_term if self.known_max_term > self.term else self.term + 1
        self.vote_for = None
        self._persist()
        return self.term

    def change_to_leader(self, term: int) -> None:
        if term != self.term:
            raise IllegalState(f"{self.self_id}: leader of term {term} in term {self.term}")
        self.role = Role.LEADER
        self.leader_id = self.self_id
        if self.led_term != term:
            self.led_term = term
            self._persist()  # durable before the new leader appends anything (its no-op first)

    def change_to_follower(self, term: int, leader_id: str) -> None:
        if term != self.term:
            raise IllegalState(f"{self.self_id}: follower of term {term} in term {self.term}")
        self.role = Role.FOLLOWER
        self.leader_id = leader_id

    def change_to_candidate(self, term: int) -> None:
        if term < self.term:
            raise IllegalState(f"{self.self_id}: candidate for term {term} in term {self.term}")
        self.known_max_term = max(self.known_max_term, term)
        self.role = Role.CANDIDATE
        self.leader_id = None

    def update_ledger(self, index: int, term: int) -> None:
        self.ledger_end_index = index
        self.ledger_end_term = term

    def describe(self) -> dict:
        return {"selfId": self.self_id, "group": self.group, "role": self.role.value, "term": self.term,
                "leaderId": self.leader_id, "voteFor": self.vote_for, "ledgerEndIndex": self.ledger_end_index,
                "ledgerEndTerm": self.ledger_end_term}
