"""The bodies' MD5s of a ReceiveMessage answer, alone (issue 32, md5): md5_many (pyx/md5_mb.h, AVX2
lanes, sixteen bodies a pass) against OpenSSL's MD5 a body (the same kernel's fallback) and hashlib,
on a pop's worth of bodies; then the whole answer's kernel, receive_reply.encode_popped, on a pop of
those bodies as stored records (the properties a producer sets), with the lanes and without.
CPU time (process_time), best of --repeat rounds of --calls calls.

    PYTHONPATH=. .venv/bin/python -m bench.md5_micro [--bodies 32] [--size 1024]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time

from broker.kernels import codec
from broker.kernels import receive_reply as K
from broker.proxy.converter import SYSTEM_PROPERTIES

TOPIC = "TopicTest"
BORN = bytes([10, 0, 0, 7]) + (51234).to_bytes(4, "big")
STORE = bytes([10, 0, 0, 1]) + (10911).to_bytes(4, "big")


def _pop_body(bodies: list[bytes]) -> bytes:
    """The bodies as a POP_MESSAGE answer's stored records, one queue."""
    out = []
    for i, body in enumerate(bodies):
        props = (f"UNIQ_KEY\x017F00000100002A9F0000000{i:08X}\x02TAGS\x01TagA\x02KEYS\x01key{i}"
                 "\x02WAIT\x01true\x02CLUSTER\x01DefaultCluster").encode()
        buf = bytearray(codec.record_length(len(body), len(TOPIC), len(props)))
        size = codec.encode_record(buf, 0, 1_000_000 + 1200 * i, 500 + i, 1_700_000_000_123 + i, TOPIC.encode(), 3,
                                   body, props, 0, 0, 1_700_000_000_100 + i, BORN, STORE)
        out.append(bytes(buf[:size]))
    return b"".join(out)


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
    total = args.bodies * args.size
    rows = [("hashlib.md5 a body", lambda: [hashlib.md5(b).digest() for b in bodies])]
    if hasattr(K, "md5_digests"):  # (a tree before it has encode_popped's row only)
        if K.md5_digests(bodies) != want or K.md5_digests(bodies, False) != want:
            raise SystemExit("md5_digests does not match hashlib")
        rows[:0] = [("md5_many (AVX2 lanes)", lambda: K.md5_digests(bodies)),
                    ("OpenSSL a body", lambda: K.md5_digests(bodies, False))]
    print(f"{args.bodies} bodies x {args.size} B, best of {args.repeat} x {args.calls} calls")
    for name, fn in rows:
        s = _best(fn, args.calls, args.repeat)
        print(f"{name:24s} {s * 1e6 / args.bodies:7.3f} CPU-us a body  {total / s / 1e9:6.2f} GB/s")
    pop = _pop_body(bodies)
    starts = {"0@3": 480}
    answer = lambda: K.encode_popped(pop, TOPIC, starts, "1700000000000 30000 0", "broker-a", 30_000,  # noqa: E731
                                     SYSTEM_PROPERTIES, 1_700_000_001_000, False)
    if answer() is None:
        raise SystemExit("encode_popped declined the pop")
    for lanes in (True, False):
        before = K.use_md5_lanes(lanes)
        try:
            s = _best(answer, args.calls, args.repeat)
        finally:
            K.use_md5_lanes(before)
        name = "encode_popped" + ("" if lanes else " (OpenSSL)")
        print(f"{name:24s} {s * 1e6:7.2f} CPU-us a call  {s * 1e6 / args.bodies:7.3f} CPU-us a message")


if __name__ == "__main__":
    main()
