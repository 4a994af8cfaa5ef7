"""Child process of tests/test_raft_entry_store.py's kill -9 test: appends DLedger entries until killed.

    python -m tests.helpers.dledger_writer --dir DIR --term T --seed S --data-size N --index-size M

Opens (and so recovers) the entry store in DIR and prints `OPEN <end index> <end term> <committed>`,
then appends entries of term T forever: bodies are a function of (seed, index) alone (body_for), in
batches of 1 to 8; after each batch's flush() it prints `ACK <index> <term>` for every entry of the
batch, all in one write(2), so a line on stdout means the entry was durable. Every few batches it
also commits what is acknowledged and persists the checkpoint, so the recovery after the kill runs
with a committedIndex to protect.
"""
from __future__ import annotations

import argparse
import os
import random


def body_for(seed: str, index: int) -> bytes:
    """0 to ~12 KiB, some bigger than a quarter of a small data file so that blanks are frequent."""
    rnd = random.Random(f"{seed}/{index}")
    n = rnd.choice((0, 1, 7, 100, 1000, 3000, 5000, 12000)) + rnd.randrange(64)
    return f"{index}|".encode() + rnd.randbytes(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--term", type=int, required=True)
    ap.add_argument("--seed", required=True)
    ap.add_argument("--data-size", type=int, required=True)
    ap.add_argument("--index-size", type=int, required=True)
    a = ap.parse_args()

    from broker.raft.entry_store import DLedgerEntryStore

    store = DLedgerEntryStore(a.dir, data_file_size=a.data_size, index_file_size=a.index_size)
    os.write(1, f"OPEN {store.ledger_end_index} {store.ledger_end_term} {store.committed_index}\n".encode())
    rnd = random.Random(f"{a.seed}/batches/{a.term}")
    batches = 0
    while True:
        acked = []
        for _ in range(rnd.randint(1, 8)):
            index, _pos = store.append(a.term, body_for(a.seed, store.ledger_end_index + 1))
            acked.append(index)
        store.flush()
        os.write(1, "".join(f"ACK {i} {a.term}\n" for i in acked).encode())
        batches += 1
        if batches % 7 == 0:
            store.update_committed_index(acked[-1])
            store.persist_checkpoint()


if __name__ == "__main__":
    main()
