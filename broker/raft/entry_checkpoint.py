"""`dledger-<selfId>/checkpoint`: DLedger's ledger checkpoint, Java properties text with
`endIndex` and `committedIndex` (DLedgerMmapFileStore.persistCheckPoint, IOUtils.properties2String:
`key=value` lines).

DLedger reads back only `committedIndex` (recover), and we do the same: it is the line below which
a data entry that fails to verify is corruption rather than a torn tail. `endIndex` is written for
DLedger's tools and for people. DLedger writes the file without fsync; we write it atomically and
durably (temp file, fsync, rename, directory fsync, the previous content kept as `checkpoint.bak`,
read when the file itself is missing), and the store flushes the entries before writing it, so a
committedIndex on disk never names an entry that is not.
"""
from __future__ import annotations

import os
from typing import NamedTuple

from broker.raft.member_state import read_properties
from broker.store.config_files import write_atomic
from broker.store.errors import CorruptStoreError

CHECK_POINT_FILE = "checkpoint"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"


class Checkpoint(NamedTuple):
    end_index: int
    committed_index: int


def checkpoint_path(dledger_dir: str) -> str:
    return os.path.join(dledger_dir, CHECK_POINT_FILE)


def load_checkpoint(dledger_dir: str) -> Checkpoint | None:
    """The checkpoint, from the file or its backup; None when neither exists (a new store).
    A value that is not a number is refused, naming the file: guessing it would move the line
    that protects committed entries."""
    path = checkpoint_path(dledger_dir)
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                props = read_properties(f.read())
        except FileNotFoundError:
            continue
        values = []
        for key in (END_INDEX_KEY, COMMITTED_INDEX_KEY):
            text = props.get(key, "").strip()
            try:
                values.append(int(text) if text else -1)
            except ValueError:
                raise CorruptStoreError(candidate, 0, f"{key}={text!r} is not a number") from None
        return Checkpoint(*values)
    return None


def persist_checkpoint(dledger_dir: str, end_index: int, committed_index: int) -> None:
    write_atomic(checkpoint_path(dledger_dir),
                 f"{END_INDEX_KEY}={end_index}\n{COMMITTED_INDEX_KEY}={committed_index}\n")
