"""A userspace Ethernet switch between TAP devices that delays, jitters, reorders and drops the
frames each port sends: netem's delay, reorder and loss without the kernel's netem qdisc (a kernel
built without CONFIG_NET_SCH_NETEM, as some CI and container kernels are).

Run as a process of its own (stdlib only, root for TUNSETIFF): `python wire.py TAP...` opens one TAP
device per name (IFF_TAP | IFF_NO_PI, non-persistent: each vanishes when this process exits, however
it exits), prints "ready", and from then on forwards frames between them as a learning switch:
a frame goes to the port its destination MAC was last seen on, a broadcast, multicast or unknown
destination (ARP's requests) to every other port. The caller moves each TAP into the network
namespace of its host (`ip link set NAME netns NS`): the device changes namespace, the file
descriptor stays here.

Impairments apply to what a port sends (its host's egress, as netem on the host's link would), with
netem's meaning:
- `delay D [J]`: each frame held D ms, plus or minus up to J ms drawn uniformly; frames leave in
  the order of their due times, so jitter reorders, as netem's time-sorted queue does;
- `reorder P [C]`: P % of the frames sent at once, the others after the delay: those overtake the
  frames held before them (needs a delay, as netem's). With C, the draws are correlated C % with
  the last one while P % stays the share (netem's own correlation lowers the share);
- `loss P`: P % of the frames dropped.

Commands, one a line on stdin, each answered with one line on stdout ("ok ..." or "error ..."):
  impair PORT SPEC...   set PORT's impairment (an empty SPEC clears it)
  clear                 clear every port's impairment
  stats                 "ok" then PORT=sent/delayed/reordered/lost/overtaken for each port
                        (overtaken: frames delivered after a frame the port sent later)
End of stdin stops the switch: the caller's death stops it too, and its TAPs with it."""
from __future__ import annotations

import fcntl
import heapq
import os
import random
import selectors
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
FRAME_MAX = 65536
BATCH = 64  # frames read from one port before the others get a turn


class SpecError(ValueError):
    """An impairment spec this switch does not understand: the message says which word."""


def _ms(word: str) -> float:
    for unit, scale in (("us", 1e-3), ("ms", 1.0), ("s", 1000.0)):
        if word.endswith(unit):
            return float(word[:-len(unit)]) * scale
    raise SpecError(f"{word}: a time needs its unit (us, ms or s)")


def _pct(word: str) -> float:
    value = float(word.rstrip("%")) / 100.0
    if not 0.0 <= value <= 1.0:
        raise SpecError(f"{word}: a percentage from 0 to 100")
    return value


class Impairment:
    """What a port's frames suffer (see the module's docstring for the meaning)."""

    def __init__(self, spec: list[str] | None = None):
        self.delay = self.jitter = 0.0  # seconds
        self.reorder = self.reorder_corr = self.loss = 0.0
        self._last_reorder = False
        words = list(spec or [])
        try:
            while words:
                what = words.pop(0)
                opt = words.pop(0) if what in ("delay", "reorder", "loss") and words else None
                if opt is None:
                    raise SpecError(f"{what!r}: expected delay D [J], reorder P [C] or loss P")
                second = words.pop(0) if words and words[0][0].isdigit() and what != "loss" else None
                if what == "delay":
                    self.delay = _ms(opt) / 1000.0
                    self.jitter = _ms(second) / 1000.0 if second else 0.0
                elif what == "reorder":
                    self.reorder, self.reorder_corr = _pct(opt), _pct(second) if second else 0.0
                else:
                    self.loss = _pct(opt)
        except ValueError as e:
            raise SpecError(f"{' '.join(spec or [])}: {e}") from None
        if self.reorder and not self.delay:
            raise SpecError("reorder needs a delay (the frames not reordered are the delayed ones)")

    def draw(self, rng: random.Random) -> tuple[str, float]:
        """("lost", 0) | ("sent", 0) | ("reordered", 0) | ("delayed", seconds) for the next frame."""
        if self.loss and rng.random() < self.loss:
            return "lost", 0.0
        if self.reorder:
            # correlated as a two-state chain that keeps the share at P: after a frame reordered the
            # next one is with P + C(1 - P), after one held with P(1 - C). (netem mixes each fresh
            # number with the last one, which shrinks the share: its "25% 50%" reorders some 7 %.)
            p, c = self.reorder, self.reorder_corr
            self._last_reorder = rng.random() < (p + c * (1 - p) if self._last_reorder else p * (1 - c))
            if self._last_reorder:
                return "reordered", 0.0
        if not self.delay:
            return "sent", 0.0
        return "delayed", max(0.0, self.delay + rng.uniform(-self.jitter, self.jitter))


class Port:
    def __init__(self, name: str):
        if not 0 < len(name.encode()) < 16 or "/" in name:
            raise ValueError(f"{name!r}: a link's name has 1 to 15 bytes and no '/'")
        self.name = name
        self.fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        fcntl.ioctl(self.fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
        self.impairment = Impairment()
        self.counts = {"sent": 0, "delayed": 0, "reordered": 0, "lost": 0, "overtaken": 0}
        self.delivered = 0  # the highest sequence number of a frame from this port delivered


class Switch:
    def __init__(self, names: list[str], seed: int | None = None):
        self.ports = [Port(n) for n in names]
        self.by_name = {p.name: p for p in self.ports}
        self.macs: dict[bytes, Port] = {}
        self.held: list[tuple[float, int, bytes, Port]] = []  # (due, seq, frame, source port)
        self.seq = 0
        self.rng = random.Random(seed)

    # -- forwarding --------------------------------------------------------------------------------
    def _deliver(self, frame: bytes, src: Port, seq: int) -> None:
        if seq < src.delivered:
            src.counts["overtaken"] += 1
        else:
            src.delivered = seq
        dst = self.macs.get(frame[:6])
        targets = [dst] if dst is not None and not frame[0] & 1 else [p for p in self.ports if p is not src]
        for p in targets:
            if p is src:
                continue
            try:
                os.write(p.fd, frame)
            except OSError:
                pass  # the port's link is down or gone: the frame is lost, as on a cable pulled out

    def _received(self, frame: bytes, src: Port, now: float) -> None:
        if len(frame) < 14:
            return
        if not frame[6] & 1:
            self.macs[frame[6:12]] = src
        fate, hold = src.impairment.draw(self.rng)
        src.counts[fate] += 1
        self.seq += 1
        if fate == "delayed":
            heapq.heappush(self.held, (now + hold, self.seq, frame, src))
        elif fate != "lost":
            self._deliver(frame, src, self.seq)

    def _release(self, now: float) -> None:
        while self.held and self.held[0][0] <= now:
            _, seq, frame, src = heapq.heappop(self.held)
            self._deliver(frame, src, seq)

    # -- control -----------------------------------------------------------------------------------
    def command(self, line: str) -> str:
        words = line.split()
        if not words:
            return "error empty command"
        try:
            if words[0] == "impair" and len(words) >= 2:
                port = self.by_name.get(words[1])
                if port is None:
                    return f"error no port {words[1]!r}"
                port.impairment = Impairment(words[2:])
                return "ok"
            if words[0] == "clear":
                for p in self.ports:
                    p.impairment = Impairment()
                return "ok"
            if words[0] == "stats":
                return "ok " + " ".join(f"{p.name}=" + "/".join(map(str, p.counts.values())) for p in self.ports)
        except SpecError as e:
            return f"error {e}"
        return f"error unknown command {line.strip()!r}"

    def run(self, control_in: int, control_out) -> None:
        sel = selectors.DefaultSelector()
        for p in self.ports:
            sel.register(p.fd, selectors.EVENT_READ, p)
        sel.register(control_in, selectors.EVENT_READ, None)
        pending = b""
        while True:
            timeout = max(0.0, self.held[0][0] - time.monotonic()) if self.held else None
            for key, _ in sel.select(timeout):
                if key.data is None:
                    chunk = os.read(control_in, 4096)
                    if not chunk:
                        return  # the caller closed the pipe or died
                    pending += chunk
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        control_out.write(self.command(line.decode()) + "\n")
                        control_out.flush()
                    continue
                port, now = key.data, time.monotonic()
                for _ in range(BATCH):
                    try:
                        frame = os.read(port.fd, FRAME_MAX)
                    except BlockingIOError:
                        break
                    except OSError:
                        sel.unregister(port.fd)  # its namespace was deleted: the device is gone
                        break
                    self._received(frame, port, now)
            self._release(time.monotonic())


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: wire.py TAP...", file=sys.stderr)
        return 2
    switch = Switch(argv, seed=int(os.environ["WIRE_SEED"]) if os.environ.get("WIRE_SEED") else None)
    print("ready", flush=True)
    switch.run(sys.stdin.fileno(), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
