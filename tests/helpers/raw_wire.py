"""Remoting frames by hand over plain blocking sockets, for the hostile-input tests: whatever bytes a
test wants on the wire (bad lengths, wrong JSON types, half a frame), read back as the broker
answers them, and a bounded wait for the broker to close the connection."""
from __future__ import annotations

import itertools
import re
import socket
import time
from pathlib import Path

import msgspec

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.store.message import decode_message

_opaques = itertools.count(1)


def frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """length | type << 24 | header length | header | body, as the clients write it."""
    return (len(header) + len(body) + 4).to_bytes(4, "big") + ((serialize_type << 24) | len(header)).to_bytes(4, "big") \
        + header + body


def header(code, ext: dict | None = None, opaque: int | None = None, **more) -> bytes:
    """A JSON request header; ext values keep their JSON types (numbers, lists, ...) as given."""
    h = {"code": code, "language": "JAVA", "version": 395, "opaque": next(_opaques) if opaque is None else opaque,
         "flag": 0}
    if ext is not None:
        h["extFields"] = ext
    h.update(more)
    return msgspec.json.encode(h)


class RawConn:
    """One blocking TCP connection to the broker."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.port = self.sock.getsockname()[1]  # the peer port the broker's log lines name
        self.notifications: list[RemotingCommand] = []  # requests the broker sent us, in order

    @property
    def peer(self) -> str:
        return f"127.0.0.1:{self.port}"

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed by the broker after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read(self) -> RemotingCommand:
        """The next frame the broker sends (its own timeout bounds the wait)."""
        length = int.from_bytes(self._exactly(4), "big")
        rest = self._exactly(length)
        hl = int.from_bytes(rest[:4], "big") & 0xFFFFFF
        return RemotingCommand.decode(rest[4:4 + hl], rest[4 + hl:], rest[0])

    def request(self, code: int, ext: dict | None = None, body: bytes = b"", **more) -> RemotingCommand:
        opaque = next(_opaques)
        self.send(frame(header(code, ext, opaque, **more), body))
        r = self.read()
        while not r.is_response:  # a request of the broker's own (NOTIFY_CONSUMER_IDS_CHANGED), as a client sees
            self.notifications.append(r)
            r = self.read()
        assert r.opaque == opaque, f"answer {r!r} to request opaque {opaque}"
        return r

    def closed_by_peer(self, timeout: float) -> bool:
        """True once the broker has closed this connection (EOF or a reset) within `timeout`;
        whatever it sent before is discarded. False if it is still open then."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.sock.settimeout(left)
                if not self.sock.recv(65536):
                    return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True

    def is_open(self) -> bool:
        """Whether the broker still holds the connection open, asked without waiting or reading."""
        timeout = self.sock.gettimeout()
        self.sock.setblocking(False)  # with a timeout set, a socket would wait for data to peek at
        try:
            return self.sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except ConnectionResetError:
            return False
        finally:
            self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()


def send_message(conn: RawConn, topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    """SEND_MESSAGE (10) as the C++ client types it."""
    return conn.request(codes.SEND_MESSAGE, {
        "producerGroup": "hostile-pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": str(int(time.time() * 1000)), "flag": 0,
        "properties": "TAGS\x01t\x02", "reconsumeTimes": 0, "unitMode": False}, body)


def pull(conn: RawConn, topic: str, queue_id: int, offset: int, max_nums: int = 32) -> RemotingCommand:
    return conn.request(codes.PULL_MESSAGE, {
        "consumerGroup": "hostile-cg", "topic": topic, "queueId": queue_id, "queueOffset": str(offset),
        "maxMsgNums": max_nums, "sysFlag": 0, "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
        "subVersion": "0"})


def bodies(r: RemotingCommand) -> list[bytes]:
    body, out, pos = bytes(r.body), [], 0
    while r.code == codes.SUCCESS and pos < len(body):
        m = decode_message(body, pos)
        out.append(bytes(m.body))
        pos += m.size
    return out


class BrokerLog:
    """The broker's stderr (its logging goes there: broker.cli's basicConfig), read from where the
    test started looking."""

    def __init__(self, path: Path):
        self.path = path
        self.start = path.stat().st_size

    def text(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read().decode("utf-8", "replace")

    def wait(self, pattern: str, timeout: float = 10.0) -> str:
        """The first line matching `pattern` (a regex) written since; fails after `timeout` naming it.
        Another process's file has no wake-up to wait on: polled, bounded."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        delay = 0.005
        while True:
            for line in self.text().splitlines():
                if rx.search(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no broker log line matching {pattern!r} within {timeout}s; "
                                     f"log since:\n{self.text()[-3000:]}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
