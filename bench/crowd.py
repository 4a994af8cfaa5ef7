"""Many connected clients at once: what 5,000 producers that each said hello cost the broker.

A real client connects and sends its HEART_BEAT (its client id, its producer group) before
anything else, then stays connected, sending a heartbeat every 30 s. `Crowd` opens `n` such
connections from this process (plain blocking sockets: opening them is not what is measured),
sends each one heartbeat, reads every answer, and keeps them open until closed. The broker's
anonymous resident memory (RssAnon: not the commit log's mapped pages, which the senders' writes
grow) is read from /proc before and after (`rss_bytes`), and the network section runs
its 50 senders beside the crowd to show what the idle connections cost the busy ones.
"""
from __future__ import annotations

import json
import socket
import struct

from broker.remoting import codes
from broker.remoting.command import RemotingCommand


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of one process, bytes: VmRSS (all of it, the commit log's mapped pages
    included) or RssAnon (its own heap: what connections cost, not what the log's maps hold)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def _read_frame(sock: socket.socket) -> bytes:
    head = _read_exact(sock, 4)
    (length,) = struct.unpack(">i", head)
    return _read_exact(sock, length)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed a crowd connection")
        out += chunk
    return bytes(out)


class Crowd:
    def __init__(self, host: str, port: int, n: int, group: str = "crowd_producers"):
        self.host, self.port, self.n, self.group = host, port, n, group
        self.socks: list[socket.socket] = []

    def __enter__(self) -> "Crowd":
        try:
            for i in range(self.n):
                s = socket.create_connection((self.host, self.port), timeout=30)
                self.socks.append(s)
                body = json.dumps({"clientID": f"127.0.0.1@crowd{i}", "producerDataSet": [{"groupName": self.group}],
                                   "consumerDataSet": []}).encode()
                cmd = RemotingCommand.request(codes.HEART_BEAT, body=body)
                cmd.opaque = i
                s.sendall(cmd.encode())
            for s in self.socks:  # every heartbeat answered: the broker has taken them all
                _read_frame(s)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.socks.clear()

    def __exit__(self, *exc) -> None:
        self.close()
