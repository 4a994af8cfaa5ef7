"""The bodies' MD5s of a ReceiveMessage answer, alone (issue 32, md5): md5_many (pyx/md5_mb.h, AVX2
lanes, sixteen bodies a pass) against OpenSSL's MD5 a body (the same kernel's fallback) and hashlib,
on a pop's worth of bodies. CPU time (process_time), best of --repeat rounds of --calls calls.

    PYTHONPATH=. .venv/bin/python -m bench.md5_micro [--bodies 32] [--size 1024]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time

from broker.kernels import receive_reply as K


def _best(fn, calls: int, repeat: int) -> float:
    """The best round's CPU seconds a call."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - t0) / calls)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bodies", type=int, default=32, help="bodies a call (a pop answers up to 32)")
    ap.add_argument("--size", type=int, default=1024, help="bytes a body")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    bodies = [os.urandom(args.size) for _ in range(args.bodies)]
    want = b"".join(hashlib.md5(b).digest() for b in bodies)
    if K.md5_digests(bodies) != want or K.md5_digests(bodies, False) != want:
        raise SystemExit("md5_digests does not match hashlib")
    total = args.bodies * args.size
    rows = [
        ("md5_many (AVX2 lanes)", lambda: K.md5_digests(bodies)),
        ("OpenSSL a body", lambda: K.md5_digests(bodies, False)),
        ("hashlib.md5 a body", lambda: [hashlib.md5(b).digest() for b in bodies]),
    ]
    print(f"{args.bodies} bodies x {args.size} B, best of {args.repeat} x {args.calls} calls")
    for name, fn in rows:
        s = _best(fn, args.calls, args.repeat)
        print(f"{name:24s} {s * 1e6 / args.bodies:7.3f} CPU-us a body  {total / s / 1e9:6.2f} GB/s")


if __name__ == "__main__":
    main()
