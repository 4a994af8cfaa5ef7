"""Test hosts of their own: one Linux network namespace per broker, controller or name server,
each with a link of its own (eth0) and an address, and faults injected at the packet level: drops
inside the namespaces with nftables (Debian's iproute2 and nftables), delay, jitter and reordering
on the wire between them.

The loopback proxies of the other fault tests close or stall a TCP stream; here a partitioned host
answers nothing at all, not even a RST: its packets are dropped by the kernel, so a peer learns of
the partition only from its own timeouts, as on a real network.

The test process (the client, the checker) stays in the root namespace, which holds the network's
first address (`.1`): it reaches every host, and the faults are between hosts unless a method says
otherwise, so that the test can still watch both sides of a partition.

The links, one of two kinds:
- `Hosts(names)`: a veth pair per host on a bridge of the root namespace (the kernel forwards);
- `Hosts(names, wire=True)`: a TAP device per host and one for the root namespace, all held by the
  wire (tests/helpers/wire.py), a userspace learning switch in a process of its own that forwards
  every Ethernet frame and can hold back, jitter, reorder or drop what each host sends. It stands
  in for the kernel's netem qdisc, which many kernels (this project's development machine's, CI's
  maybe) are built without: one mechanism everywhere, so a delay test behaves the same here and in
  CI. A ping through it with "delay 200ms 50ms" on both hosts takes 400 ms +- 100 ms (each leg
  200 +- 50); unimpaired, a fraction of a millisecond more than the bridge.

Faults by nftables, each a rule in a table `inet faults` of the host's namespace (stateless: a TCP
connection open across the fault stays open and silent, as it would behind a broken switch); they
work the same on either kind of link:
- partition(a, b): nothing passes between a and b, either way;
- partition_one_way(src, dst): dst hears nothing from src (src still hears dst);
- isolate(a): a partitioned from every other host;
- loss(a, percent): each packet between a and another host dropped at random, in each direction;
- heal(): every rule removed (and every impairment on the wire).
Faults on the wire (`wire=True` only), netem's words for what a host sends, the root namespace's
traffic included (as netem on the host's eth0 would):
- impair(a, "delay 200ms 50ms"): held 200 ms +- 50 ms, uniformly (jitter reorders, as netem's);
- impair(a, "delay 10ms reorder 25% 50%"): a quarter of the frames sent at once, overtaking the
  rest, held 10 ms;
- impaired(a): frames by fate so far, and how many were overtaken by a frame sent after them: the
  proof that an impairment bit.

Names carry a random token, so a run that crashed leaves namespaces and links that never clash
with the next run's, and the subnet is one no interface of the root namespace uses yet."""
from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import sys

SUPERNET = "10.213"  # hosts are 10.213.<k>.2... /24, the root namespace 10.213.<k>.1


class NetnsError(RuntimeError):
    """An `ip` or `nft` command failed: the message has its argv and stderr."""


def _run(argv: list[str], stdin: str | None = None) -> str:
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def unavailable() -> str | None:
    """Why namespace hosts cannot be made here, or None if they can (root, `ip netns`, veth, a
    bridge and nft all work): the reason a test's skip gives."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs these tests as root)"
    if shutil.which("ip") is None:
        return "`ip` (Debian's iproute2) is not installed"
    if shutil.which("nft") is None:
        return "`nft` (Debian's nftables) is not installed: the Makefile's testdeps installs it"
    probe = f"rmqprobe{secrets.token_hex(2)}"
    try:
        _run(["ip", "netns", "add", probe])
    except NetnsError as e:
        return f"`ip netns add` fails here: {e}"
    try:
        _run(["ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe"])
    except NetnsError as e:
        return f"nftables does not work in a namespace here: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Wire:
    """The userspace switch (tests/helpers/wire.py) in a process of its own, driven through its
    stdin: one TAP device per name, made before this returns. close() (or this process's death,
    which closes the pipe) stops it, and its TAPs vanish with it."""

    def __init__(self, taps: list[str]):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wire.py")
        self.proc = subprocess.Popen([sys.executable, script, *taps], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1)
        first = self.proc.stdout.readline().strip()
        if first != "ready":
            self.proc.wait(10)  # it failed: exits by itself
            why = self.proc.stderr.read().strip().splitlines()
            self.close()
            raise NetnsError(f"the wire did not start: {why[-1] if why else repr(first)}")

    def command(self, line: str) -> str:
        """Send one command; its answer's text after "ok" (NetnsError for an "error" answer)."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer.startswith("ok"):
            raise NetnsError(f"wire {line!r}: {answer or 'no answer: ' + self.proc.stderr.read().strip()}")
        return answer[2:].strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # end of its input: it stops
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if not f.closed:
                f.close()


def wire_unavailable() -> str | None:
    """Why hosts on the userspace wire cannot be made here, or None if they can."""
    why = unavailable()
    if why is not None:
        return why
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing: the wire's TAP devices need the kernel's tun driver"
    try:
        Wire([f"rmqprobe{secrets.token_hex(2)}"]).close()
    except NetnsError as e:
        return str(e)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    used = [ipaddress.ip_interface(w).network for line in _run(["ip", "-4", "-o", "addr", "show"]).splitlines()
            for w in line.split()[3:4]]
    for _ in range(64):
        net = ipaddress.ip_network(f"{SUPERNET}.{secrets.randbelow(250) + 3}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetnsError(f"no free /24 in {SUPERNET}.0.0/16")


class Hosts:
    """A bridge and one namespace per name, each with an address on the bridge. Use as a context
    manager (or call close()): every namespace, link and rule is removed, even after a failure."""

    def __init__(self, names: list[str], wire: bool = False):
        self.wire = wire
        self._wire: Wire | None = None
        self.token = secrets.token_hex(3)
        self.net = _free_subnet()
        addrs = list(self.net.hosts())
        self.gateway = str(addrs[0])  # the root namespace's address: the test and its clients
        self.names = list(names)
        self.addr: dict[str, str] = {n: str(addrs[i + 1]) for i, n in enumerate(self.names)}
        self.ns: dict[str, str] = {n: f"rmq{self.token}-{n}" for n in self.names}
        self.bridge = f"rmqb{self.token}"
        self._made_ns: list[str] = []
        self._made_links: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        if self.wire:
            self._build_wire()
        else:
            self._build_bridge()
        for name in self.names:
            ns = self.ns[name]
            _run(["ip", "-n", ns, "addr", "add", f"{self.addr[name]}/{self.net.prefixlen}", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            self.nft(name, "table inet faults {\n"
                           "  chain input { type filter hook input priority 0; policy accept; }\n"
                           "  chain output { type filter hook output priority 0; policy accept; }\n}\n")

    def _build_bridge(self) -> None:
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._made_links.append(self.bridge)
        _run(["ip", "addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i, name in enumerate(self.names):
            ns, outer = self.ns[name], f"rmqv{self.token}{i}"
            _run(["ip", "netns", "add", ns])
            self._made_ns.append(ns)
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns])
            self._made_links.append(outer)
            _run(["ip", "link", "set", outer, "master", self.bridge, "up"])

    def _build_wire(self) -> None:
        self.taps = {n: f"rmqt{self.token}{i}" for i, n in enumerate(self.names)}
        gateway_tap = f"rmqt{self.token}g"
        self._wire = Wire([*self.taps.values(), gateway_tap])
        self._made_links.append(gateway_tap)
        _run(["ip", "addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", gateway_tap])
        _run(["ip", "link", "set", gateway_tap, "up"])
        for name in self.names:
            ns, tap = self.ns[name], self.taps[name]
            _run(["ip", "netns", "add", ns])
            self._made_ns.append(ns)
            # the device moves; its file descriptor stays with the wire
            _run(["ip", "link", "set", tap, "netns", ns])
            _run(["ip", "-n", ns, "link", "set", tap, "name", "eth0"])

    def close(self) -> None:
        errors = []
        if self._wire is not None:  # first: a TAP in a namespace being deleted goes with it
            self._wire.close()
            self._wire = None
        for ns in reversed(self._made_ns):  # its end of each veth goes with it
            p = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if p.returncode != 0:
                errors.append(f"ip netns del {ns}: {p.stderr.strip()}")
        for link in reversed(self._made_links):
            subprocess.run(["ip", "link", "del", link], capture_output=True)  # gone with its peer already
        self._made_ns.clear()
        self._made_links.clear()
        if errors:
            raise NetnsError("; ".join(errors))

    def __enter__(self) -> "Hosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- processes ---------------------------------------------------------------------------------
    def wrap(self, name: str) -> list[str]:
        """The argv prefix that runs a command inside host `name` (`ip netns exec` then execs it, so
        the pid and the process group are the command's own)."""
        return ["ip", "netns", "exec", self.ns[name]]

    # -- faults ------------------------------------------------------------------------------------
    def nft(self, name: str, script: str) -> None:
        _run(self.wrap(name) + ["nft", "-f", "-"], stdin=script)

    def _rules(self, name: str, rules: list[str]) -> None:
        self.nft(name, "".join(f"add rule inet faults {r}\n" for r in rules))

    def partition(self, a: str, b: str) -> None:
        """Nothing passes between a and b, either way (each drops what the other sends it)."""
        self.partition_one_way(a, b)
        self.partition_one_way(b, a)

    def partition_one_way(self, src: str, dst: str) -> None:
        """`dst` hears nothing from `src`: src's packets are dropped as they reach dst; dst's still
        reach src (a TCP connection between them is then dead both ways for data that needs an
        answer, but src keeps receiving what dst sends)."""
        self._rules(dst, [f"input ip saddr {self.addr[src]} counter drop"])

    def isolate(self, a: str) -> None:
        """a partitioned from every other host (the root namespace, the test's, still reaches it)."""
        for b in self.names:
            if b != a:
                self.partition(a, b)

    def loss(self, a: str, percent: int) -> None:
        """Each packet between `a` and another host dropped at random with `percent` % chance, in
        each direction (the root namespace's traffic, the test's own reads, is spared)."""
        assert 0 < percent < 100, percent
        self._rules(a, [f"input ip saddr != {self.gateway} numgen random mod 100 < {percent} counter drop",
                        f"output ip daddr != {self.gateway} numgen random mod 100 < {percent} counter drop"])

    def impair(self, name: str, spec: str) -> None:
        """What the host sends delayed, jittered, reordered or dropped, in netem's words ("delay 200ms
        50ms", "delay 10ms reorder 25% 50%", "loss 5%"; see tests/helpers/wire.py): only on hosts
        made with `wire=True`."""
        if self._wire is None:
            raise NetnsError("impair() needs hosts on the userspace wire: Hosts(names, wire=True)")
        self._wire.command(f"impair {self.taps[name]} {spec}")

    def impaired(self, name: str) -> dict[str, int]:
        """Frames the wire took from host `name`, by fate (sent, delayed, reordered, lost), and how
        many of them arrived after a frame the host sent later (overtaken): proof that an
        impairment bit."""
        if self._wire is None:
            raise NetnsError("impaired() needs hosts on the userspace wire: Hosts(names, wire=True)")
        stats = dict(w.split("=", 1) for w in self._wire.command("stats").split())
        return dict(zip(("sent", "delayed", "reordered", "lost", "overtaken"),
                        map(int, stats[self.taps[name]].split("/"))))

    def heal(self) -> None:
        for name in self.names:
            self.nft(name, "flush table inet faults\n")
        if self._wire is not None:
            self._wire.command("clear")

    def rules(self, name: str) -> str:
        """The host's fault table as nft lists it, each rule with its counter: for messages."""
        return _run(self.wrap(name) + ["nft", "list", "table", "inet", "faults"])

    def dropped(self, name: str) -> int:
        """Packets the host's fault rules dropped so far: proof that a fault bit."""
        return sum(int(m) for m in re.findall(r"counter packets (\d+)", self.rules(name)))
