"""Differential conformance: one scenario of remoting requests replayed against Apache RocketMQ's
Java broker (tests.helpers.java_broker) and ours (tests.helpers.ha_cluster), and every answer
compared: response code, remark, extFields, and the body field by field (JSON bodies flattened to
paths, message batches decoded record by record).

A scenario is a list of `Step`s. Each step is sent to both sides on a long-lived raw connection
(tests.helpers.raw_wire.RawConn) to the same role (master, slave or name server); values that depend
on an earlier answer (a msgId, a commit-log offset) are callables of that side's saved answers, so
each side gets its own.

What is normalised, and only this, because it must differ between two brokers:
- addresses and ports (`127.0.0.1:port`, in values and in JSON keys) -> `<addr>`;
- offset message ids (32 hex digits: store host, port and commit-log offset) -> `<msgid>`;
- store timestamps, commit-log (physical) offsets and the topic/group counts (`VOLATILE`), and the
  index's last-update time and offset (named by their step): compared for presence only. The
  commit-log offsets differ because the Java broker stores properties of its own in each record
  (docs/compat.md); queue offsets are never normalised, nor born timestamps (the scenario sends
  the same ones to both).
Anything else that differs is a difference: either fixed in our broker or listed in the test's
KEPT table with the reason (and in docs/compat.md).
"""
from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec

from broker.remoting.command import RemotingCommand
from broker.store.config_files import parse_fastjson
from broker.store.message import decode_message
from tests.helpers.procs import wait_until
from tests.helpers.raw_wire import RawConn, frame, header

ADDR = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}")
MSGID = re.compile(r"\b[0-9A-F]{32}\b")
# Present on both sides but necessarily different, in every step: store times, commit-log
# offsets, and the topic and group counts (each broker has its own system topics and groups;
# the scenario compares those lists by name)
VOLATILE = ("msg[].storeTimestamp", "msg[].physicalOffset", "ext.totalTopicNum", "ext.totalGroupNum")


@dataclass
class Step:
    name: str
    code: int
    ext: dict = field(default_factory=dict)  # values: str/int, or callable(saved answers) -> value
    body: Any = b""  # bytes, a JSON-able object, or callable(saved answers) -> either
    to: str = "broker"  # "broker", "slave" or "namesrv"
    kind: str = "json"  # how bodies compare: "json" (field by field), "messages" (record by record), "none"
    volatile: tuple = ()  # path globs compared for presence only (times, offsets that must differ)
    remark: bool = True  # False where RocketMQ's remark carries unstable detail (a stack, a time)
    select: Callable | None = None  # the part of a JSON body this scenario owns (e.g. its own topics)
    save: str | None = None  # keep the answer under this name for later steps
    until: Callable | None = None  # (answer, saved answers) -> resend (bounded) until true: async indexes/routes
    frame: Callable | None = None  # opaque -> a whole hand-made frame (malformed headers)
    ours_may_add: bool = False  # paths only our answer has are not differences (our own extra figures)


def _resolve(value, saved: dict):
    return value(saved) if callable(value) else value


def ext_of(name: str, key: str) -> Callable:
    """An extField of an earlier answer on the same side."""
    return lambda saved: saved[name].ext[key]


class Side:
    """One broker deployment (master, slave, name server) and the answers it gave."""

    def __init__(self, label: str, ports: dict[str, int]):
        self.label = label
        self.ports = ports
        self.conns: dict[str, RawConn] = {}
        self.saved: dict[str, RemotingCommand] = {}

    def conn(self, to: str) -> RawConn:
        if to not in self.conns:
            self.conns[to] = RawConn(self.ports[to], timeout=15)
        return self.conns[to]

    def send(self, step: Step) -> RemotingCommand:
        ext = {k: _resolve(v, self.saved) for k, v in step.ext.items()}
        body = _resolve(step.body, self.saved)
        if not isinstance(body, (bytes, bytearray)):
            body = msgspec.json.encode(body)
        conn = self.conn(step.to)
        if step.frame is not None:
            opaque = 900_000 + len(self.saved)
            conn.send(step.frame(opaque))
            r = conn.read()
        else:
            r = conn.request(step.code, ext, bytes(body))
        if step.until is not None:
            deadline = time.monotonic() + 20
            while not step.until(r, self.saved) and time.monotonic() < deadline:
                time.sleep(0.05)
                r = conn.request(step.code, ext, bytes(body))
        if step.save:
            self.saved[step.save] = r
        return r

    def close(self) -> None:
        for c in self.conns.values():
            c.close()
        self.conns.clear()


def missing_field_frame(code: int, ext: dict) -> Callable:
    """A request whose header lacks a required field (ext as given, JSON-typed)."""
    return lambda opaque: frame(header(code, ext, opaque))


# -- flattening ------------------------------------------------------------------------------------

def normalise(v):
    if isinstance(v, str):
        return MSGID.sub("<msgid>", ADDR.sub("<addr>", v))
    return v


def flatten(value, path: str, out: dict) -> dict:
    if isinstance(value, dict):
        if not value:
            out[path] = {}
        for k, v in value.items():
            flatten(v, f"{path}.{normalise(str(k))}", out)
    elif isinstance(value, list):
        if not value:
            out[path] = []
        for i, v in enumerate(value):
            flatten(v, f"{path}[{i}]", out)
    else:
        out[path] = normalise(value)
    return out


def decode_json(body: bytes):
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:  # fastjson leaves integer map keys unquoted
        return parse_fastjson(body.decode("utf-8"))


def messages(body: bytes) -> list[dict]:
    out, pos = [], 0
    while pos < len(body):
        m = decode_message(body, pos)
        pos += m.size
        out.append({"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
                    "physicalOffset": m.physical_offset, "body": m.body.decode("utf-8", "replace"),
                    "flag": m.flag, "sysFlag": m.sys_flag, "bornTimestamp": m.born_timestamp,
                    "bornHost": m.born_host, "storeTimestamp": m.store_timestamp, "storeHost": m.store_host,
                    "reconsumeTimes": m.reconsume_times, "props": dict(sorted(m.properties.items()))})
    return out


def view(step: Step, r: RemotingCommand) -> dict:
    """The answer as flat path -> value."""
    out: dict = {"code": r.code}
    if step.remark:
        out["remark"] = normalise(r.remark) if r.remark else None
    for k, v in (r.ext or {}).items():
        out[f"ext.{k}"] = normalise(v)
    body = bytes(r.body or b"")
    if step.kind == "none" or not body:
        out["body"] = "<present>" if body and step.kind != "none" else None
        return out
    if step.kind == "messages":
        flatten(messages(body), "msg", out)
        return out
    data = decode_json(body)
    if step.select is not None:
        data = step.select(data)
    flatten(data, "body", out)
    return out


def compare(step: Step, java: RemotingCommand, ours: RemotingCommand) -> list[tuple[str, str, Any, Any]]:
    """(step, path, java value, our value) for every path whose values differ or exist on one side."""
    a, b = view(step, java), view(step, ours)
    globs = VOLATILE + tuple(step.volatile)
    diffs = []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, "<absent>"), b.get(path, "<absent>")
        if va == vb or (step.ours_may_add and va == "<absent>"):
            continue
        if "<absent>" not in (va, vb) and any(matches(g, path) for g in globs):
            continue
        diffs.append((step.name, path, va, vb))
    return diffs


_INDEX = re.compile(r"\[\d+\]")


@functools.lru_cache(maxsize=None)
def _glob(pattern: str) -> re.Pattern:
    """A path glob: `*` is any run of characters, `[]` any list index."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*"))


def matches(pattern: str, path: str) -> bool:
    """Whether `path` (a step name or a flat path) is one `pattern` names: `msg[].x` names every
    record's x, `msg[1].*` everything of the second."""
    g = _glob(pattern)
    return g.fullmatch(path) is not None or g.fullmatch(_INDEX.sub("[]", path)) is not None


def run(java: Side, ours: Side, steps: list[Step]) -> list[tuple[str, str, Any, Any]]:
    diffs = []
    for step in steps:
        diffs += compare(step, java.send(step), ours.send(step))
    return diffs


# -- the two deployments ---------------------------------------------------------------------------

# broker.conf keys both brokers get (beside the cluster, name, ports and store root both helpers
# write): a small maxMessageSize, so that "a body too large" is cheap to send. ha_cluster.Broker
# also writes delay levels of 100ms, a unit RocketMQ does not parse; the scenario sends no
# delayed message, so the Java broker keeps its default levels.
SHARED_CONF = "maxMessageSize=65536\n"
# The Java brokers' JVM: the heap java_broker gives them, with the client compiler only and the
# serial collector, which boot in less CPU on a shared 2-core machine (nothing here is a benchmark)
JVM = ["-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-XX:+IgnoreUnrecognizedVMOptions"]


class Deployment:
    """Apache RocketMQ's name server, master and slave, and ours, started side by side (each
    deployment with its own name server; the same broker.conf keys), stopped on exit."""

    def __init__(self, root):
        self.root = root

    def __enter__(self) -> "Deployment":
        import threading

        from tests.helpers.ha_cluster import Broker, NameServer
        from tests.helpers.java_broker import JavaBroker, JavaNameServer
        self.procs: list = []
        lock = threading.Lock()
        errors: list[BaseException] = []

        def started(p):
            with lock:
                self.procs.append(p)
            return p

        def in_threads(*fns):
            threads = [threading.Thread(target=_catching(fn, errors)) for fn in fns]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        def java():
            self.jns = started(JavaNameServer(self.root / "java"))
            self.jmaster = JavaBroker(self.root / "java", "master", self.jns.addr, extra=SHARED_CONF, jvm=JVM)
            self.jslave = JavaBroker(self.root / "java", "slave", self.jns.addr, role="SLAVE", broker_id=1,
                                     extra=SHARED_CONF + f"haMasterAddress=127.0.0.1:{self.jmaster.ha_port}\n",
                                     jvm=JVM)
            in_threads(lambda: started(self.jmaster).start(), lambda: started(self.jslave).start())

        def ours():
            (self.root / "ours").mkdir(parents=True, exist_ok=True)
            self.ns = started(NameServer(self.root / "ours"))
            self.master = Broker(self.root / "ours", "master", self.ns.addr, "ASYNC_MASTER", 0, SHARED_CONF)
            self.slave = Broker(self.root / "ours", "slave", self.ns.addr, "SLAVE", 1,
                                SHARED_CONF + f"haMasterAddress=127.0.0.1:{self.master.ha_port}\n")
            in_threads(lambda: started(self.master).start(), lambda: started(self.slave).start())

        in_threads(java, ours)
        if errors:
            self.__exit__(None, None, None)
            raise errors[0]
        for ns in (self.jns, self.ns):  # the route steps compare master and slave as registered
            wait_until(lambda: _registered(ns.port) == {"0", "1"}, 60, f"master and slave on {ns.addr}")
        return self

    def ports(self) -> dict:
        return {"java": {"broker": self.jmaster.port, "slave": self.jslave.port, "namesrv": self.jns.port},
                "ours": {"broker": self.master.port, "slave": self.slave.port, "namesrv": self.ns.port}}

    def sides(self) -> tuple[Side, Side]:
        p = self.ports()
        return Side("java", p["java"]), Side("ours", p["ours"])

    def __exit__(self, *exc) -> None:
        # Killed, not stopped: nothing here is kept, and a JVM's shutdown hooks take seconds
        for p in reversed(self.procs):
            if getattr(p, "child", None) is not None:
                p.child.kill_group()


def _registered(port: int) -> set[str]:
    """The broker ids of broker-a a name server lists (GET_BROKER_CLUSTER_INFO)."""
    from broker.remoting import codes
    from tests.helpers.ha_cluster import call
    r = call(port, codes.GET_BROKER_CLUSTER_INFO)
    if r.code != codes.SUCCESS:
        return set()
    table = decode_json(bytes(r.body)).get("brokerAddrTable", {})
    return {str(i) for i in table.get("broker-a", {}).get("brokerAddrs", {})}


def _catching(fn, errors: list):
    def run():
        try:
            fn()
        except BaseException as e:  # re-raised by the starting thread
            errors.append(e)
    return run
