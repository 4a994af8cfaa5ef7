"""The userspace wire (tests/helpers/wire.py) that stands in for the kernel's netem: its impairments
mean what netem's do, a TCP round trip through it takes the delay it was given, the nftables
faults of tests/helpers/netns.py still bite on hosts linked by it, and closing the hosts stops it and
leaves no link or namespace behind."""
from __future__ import annotations

import random
import socket
import statistics
import subprocess
import sys
import time

import pytest

from tests.helpers.netns import Hosts, NetnsError, Wire, wire_unavailable
from tests.helpers.wire import Impairment, SpecError

ECHO = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000)); s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    while (d := c.recv(100)):
        c.sendall(d)
    c.close()
"""


def test_impairment_specs_mean_what_netems_do():
    rng = random.Random(7)
    i = Impairment("delay 200ms 50ms".split())
    holds = [i.draw(rng) for _ in range(5000)]
    assert {fate for fate, _ in holds} == {"delayed"}
    assert 0.150 <= min(h for _, h in holds) < 0.155 and 0.245 < max(h for _, h in holds) <= 0.250
    assert abs(statistics.mean(h for _, h in holds) - 0.200) < 0.003

    r = Impairment("delay 10ms reorder 25%".split())
    fates = [r.draw(rng)[0] for _ in range(10000)]
    assert 0.23 < fates.count("reordered") / len(fates) < 0.27
    assert fates.count("delayed") + fates.count("reordered") == len(fates)
    # correlated draws: a frame reordered makes the next one likelier to be (25% + 50% of 75%),
    # the share of frames reordered stays 25 %
    c = Impairment("delay 10ms reorder 25% 50%".split())
    fates_c = [c.draw(rng)[0] for _ in range(20000)]
    after = [b for a, b in zip(fates_c, fates_c[1:]) if a == "reordered"]
    assert 0.23 < fates_c.count("reordered") / len(fates_c) < 0.27
    assert 0.59 < after.count("reordered") / len(after) < 0.66

    lossy = Impairment(["loss", "30%"])
    lost = [lossy.draw(rng)[0] for _ in range(10000)].count("lost")
    assert 2700 < lost < 3300

    assert Impairment([]).draw(rng) == ("sent", 0.0)


@pytest.mark.parametrize("spec,why", [
    ("reorder 25%", "needs a delay"),
    ("loss 150%", "from 0 to 100"),
    ("delay", "expected delay"),
    ("jitter 5ms", "expected delay"),
    ("delay fast", "fast"),
    ("delay 10", "needs its unit"),
])
def test_a_bad_impairment_spec_is_refused_saying_why(spec: str, why: str):
    with pytest.raises(SpecError, match=why):
        Impairment(spec.split())


WHY = wire_unavailable()


def _round_trips(addr: str, n: int) -> list[float]:
    with socket.create_connection((addr, 7000), timeout=10) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        for _ in range(n):
            t = time.monotonic()
            c.sendall(b"x")
            assert c.recv(1) == b"x"
            times.append(time.monotonic() - t)
        return times


@pytest.mark.skipif(WHY is not None, reason=f"needs the userspace wire: {WHY}")
def test_a_round_trip_through_the_wire_takes_the_delay_and_the_faults_still_bite():
    with Hosts(["a", "b"], wire=True) as hosts:
        echo = subprocess.Popen(hosts.wrap("b") + [sys.executable, "-c", ECHO, hosts.addr["b"]],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert echo.stdout.readline().strip() == "listening"
            plain = statistics.median(_round_trips(hosts.addr["b"], 20))
            assert plain < 0.05, f"an unimpaired round trip took {plain * 1000:.1f} ms"

            hosts.impair("b", "delay 100ms 20ms")  # b's answers held 80-120 ms
            delayed = _round_trips(hosts.addr["b"], 10)
            # at least the delay; the ceiling only a sanity bound on a loaded machine
            assert all(0.08 <= t < 2.0 for t in delayed), [round(t * 1000) for t in delayed]
            assert hosts.impaired("b")["delayed"] >= 10

            hosts.heal()  # the impairment cleared with the rules
            assert statistics.median(_round_trips(hosts.addr["b"], 10)) < 0.05

            # nftables' partition inside the namespaces works the same on the wire's links
            connect = hosts.wrap("a") + [sys.executable, "-c", "import socket, sys; "
                                         "socket.create_connection((sys.argv[1], 7000), timeout=1).close()",
                                         hosts.addr["b"]]
            assert subprocess.run(connect, capture_output=True).returncode == 0
            hosts.partition("a", "b")
            p = subprocess.run(connect, capture_output=True, text=True)
            assert p.returncode != 0 and "timed out" in p.stderr, p.stderr
            assert hosts.dropped("b") > 0
        finally:
            echo.kill()
            echo.wait(10)
        with pytest.raises(NetnsError, match="no port|unknown|expected"):
            hosts._wire.command("impair nosuch delay 1ms")
        wire = hosts._wire.proc
    assert wire.wait(10) is not None, "the wire still runs after the hosts closed"
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert hosts.token not in links and hosts.token not in spaces, (links, spaces)


SENDER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[2])):
    s.sendto(i.to_bytes(4, "big"), (sys.argv[1], 7001))
"""


@pytest.mark.skipif(WHY is not None, reason=f"needs the userspace wire: {WHY}")
@pytest.mark.parametrize("spec", ["delay 10ms reorder 25%", "delay 20ms 10ms"])
def test_datagrams_arrive_out_of_order_through_the_wire(spec: str):
    """A burst of numbered datagrams from a host, all delivered, some after ones sent later: the
    reordered ones overtaking the held ones, or the jitter reordering as netem's does."""
    n = 300
    with Hosts(["b"], wire=True) as hosts, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind((hosts.gateway, 7001))
        rx.settimeout(5)
        hosts.impair("b", spec)
        subprocess.run(hosts.wrap("b") + [sys.executable, "-c", SENDER, hosts.gateway, str(n)], check=True)
        got = [int.from_bytes(rx.recv(16), "big") for _ in range(n)]
        fates = hosts.impaired("b")
    assert sorted(got) == list(range(n)), "datagrams lost or repeated"
    late = sum(1 for i, m in enumerate(got) if m < max(got[:i], default=-1))
    # The wire's own count, not the receiver's, proves the wire reordered: the host's kernel may
    # reorder further (frames written to a tap from one CPU, then another, wait in two per-CPU
    # backlogs), so the receiver can see a few more late datagrams than the wire made.
    assert fates["overtaken"] >= n // 20 and late > 0, (late, fates)


@pytest.mark.skipif(WHY is not None, reason=f"needs the userspace wire: {WHY}")
def test_a_bad_link_name_stops_the_wire_saying_why():
    with pytest.raises(NetnsError, match="1 to 15 bytes"):
        Wire(["x" * 16])


@pytest.mark.skipif(WHY is not None, reason=f"needs the userspace wire: {WHY}")
def test_impairing_hosts_off_the_wire_is_refused_saying_why():
    with Hosts(["a"]) as hosts:
        with pytest.raises(NetnsError, match="wire=True"):
            hosts.impair("a", "delay 10ms")
