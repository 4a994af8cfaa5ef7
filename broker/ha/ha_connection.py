"""HAConnection: the master's link to one slave, a read thread and a write thread as in 4.x.

The read side takes the slave's 8-byte offset reports: the first is where to start, every later
one an acknowledgement that raises the service's `acked` offset. The write side streams the
commit log from that offset with `socket.sendfile` straight from the segment file (no copy in
Python), at most haTransferBatchSize per frame and never across a segment's end, and sends a
12-byte heartbeat when idle. It sleeps on the `wrote` futex, woken by the broker's appends.
"""
from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time

from broker.kernels.ha import frame_header, last_report, reallocate_byte_buffer
from broker.store.mapped_file import offset_to_name
from broker.store.offset_table import Slot

log = logging.getLogger("ha")
# controller mode: a slave's first frame (no offset is negative, so a 4.x report never looks like it)
HELLO_MAGIC = -0x4155544F  # "AUTO"
HELLO_SIZE = 24
# RocketMQ 5's AutoSwitchHAClient opens with state HANDSHAKE (ordinal 1, int32), two shorts and its
# brokerId (int64); our hello's first int32 is -1 (the magic's high half)
AUTOSWITCH_HANDSHAKE = 1
AUTOSWITCH_HANDSHAKE_SIZE = 16


class HAConnection:
    def __init__(self, service, sock: socket.socket, peer: str):
        self.service = service
        self.config = service.config
        self.table = service.table
        self.sock = sock
        self.peer = peer
        self.request_offset = -1  # the slave's first report: where its log ends
        self.ack = -1
        self.pair = -1  # controller mode: the slot pair its acks are published in
        self.slave_id = -1
        self._requested = threading.Event()
        self._closed = threading.Event()
        self._files: dict[int, object] = {}
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # a slave reports at least every heartbeat interval: silence past housekeeping is a dead link
        sock.settimeout(self.config.haHousekeepingInterval / 1000)

    def start(self) -> None:
        threading.Thread(target=self._read, name=f"ha-read-{self.peer}", daemon=True).start()
        threading.Thread(target=self._write, name=f"ha-write-{self.peer}", daemon=True).start()

    def close(self, why: str, level: int = logging.WARNING) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self._requested.set()
        log.log(level, "link to slave %s closed: %s", self.peer, why)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for f in self._files.values():
            f.close()
        self._files.clear()
        self.service.connection_closed(self)

    # -- read side: the slave's reports ----------------------------------------------------
    def _hello(self, buf: bytearray) -> bool:
        """Controller mode: the slave's first 24 bytes are HELLO_MAGIC, its brokerId and the master
        epoch it follows. A slave of another epoch (it follows an older master, or a newer one
        this broker does not know of yet) must not be streamed to: its log is not ours to extend."""
        mv = memoryview(buf)
        got = 0
        while got < HELLO_SIZE:
            # RocketMQ's AutoSwitch HANDSHAKE is 16 bytes and waits for an answer: look at it then
            want = AUTOSWITCH_HANDSHAKE_SIZE if got < AUTOSWITCH_HANDSHAKE_SIZE else HELLO_SIZE
            n = self.sock.recv_into(mv[got:want])
            if n == 0:
                self.close("the slave closed it before its hello", logging.INFO)
                return False
            got += n
            if got == AUTOSWITCH_HANDSHAKE_SIZE and struct.unpack_from(">i", buf)[0] == AUTOSWITCH_HANDSHAKE:
                bid = struct.unpack_from(">q", buf, 8)[0]
                self.close(f"slave {bid} opened with RocketMQ 5's AutoSwitch HA HANDSHAKE frame: this broker's "
                           "controller mode streams its own HA hello instead, so a RocketMQ broker cannot be its "
                           "slave (docs/ha.md, With Apache RocketMQ's broker)", logging.ERROR)
                return False
        magic, bid, epoch = struct.unpack_from(">qqq", buf)
        mine = self.table.load(Slot.HA_EPOCH)  # the broker's, as it switched roles
        if magic != HELLO_MAGIC or bid < 0:
            self.close(f"its first bytes are not a controller-mode hello (magic {magic}, brokerId {bid}): a slave "
                       "not in controller mode cannot follow a controller-mode master", logging.ERROR)
            return False
        if epoch != mine:
            self.close(f"slave {bid} follows master epoch {epoch}, this master serves epoch {mine}")
            return False
        self.slave_id = bid
        self.pair = self.service.claim_pair(bid)
        if self.pair < 0:
            self.close(f"slave {bid}: every slot for a slave's acknowledgement is taken", logging.ERROR)
            return False
        log.info("slave %s is broker %d of master epoch %d", self.peer, bid, epoch)
        return True

    def _read(self) -> None:
        buf = bytearray(4096)
        mv = memoryview(buf)
        fill = 0
        try:
            if self.config.enableControllerMode and not self._hello(buf):
                return
        except socket.timeout:
            return self.close(f"no hello for {self.config.haHousekeepingInterval} ms")
        except OSError as e:
            return self.close(f"read failed: {e}")
        while not self._closed.is_set():
            try:
                n = self.sock.recv_into(mv[fill:])
            except socket.timeout:
                return self.close(f"no report for {self.config.haHousekeepingInterval} ms")
            except OSError as e:
                return self.close(f"read failed: {e}")
            if n == 0:
                return self.close("the slave closed it", logging.INFO)
            value, pos = last_report(buf, 0, fill + n)
            fill = reallocate_byte_buffer(buf, pos, fill + n)
            if value < 0:
                continue
            wrote = self.table.load(Slot.WROTE)
            if value > wrote:
                # RocketMQ #1155/#3015: a slave ahead of us has a log we never wrote (it followed
                # another master, or ours lost its tail). Streaming would corrupt it; say so.
                return self.close(f"the slave's log ends at {value}, beyond this master's {wrote}: it has diverged "
                                  f"and must be wiped (or made master) before it can follow us", logging.ERROR)
            if self.request_offset < 0:
                self.request_offset = value
                self._requested.set()
            self.ack = value
            if self.pair >= 0:
                self.service.on_slave_ack(self.pair, value)
            else:
                self.service.on_ack(value)

    # -- write side: the commit log --------------------------------------------------------
    def _file(self, base: int):
        f = self._files.get(base)
        if f is None:
            for old in [b for b in self._files if b < base]:
                self._files.pop(old).close()
            f = self._files[base] = open(os.path.join(self.config.commitlog_dir, offset_to_name(base)), "rb")
        return f

    def _write(self) -> None:
        self._requested.wait()
        if self._closed.is_set():
            return
        nxt = self.request_offset
        min_offset = self.service.min_offset()
        if nxt == 0:
            # A fresh slave gets everything we still hold (4.x sends only from the newest segment,
            # leaving the slave unable to serve older messages if this master is lost).
            nxt = min_offset
        elif nxt < min_offset:
            return self.close(f"the slave's log ends at {nxt}, before this master's oldest offset {min_offset}: "
                              f"the slave fell behind and cannot catch up; wipe its store to bootstrap it afresh",
                              logging.ERROR)
        log.info("slave %s linked: streaming from offset %d", self.peer, nxt)
        seg = self.config.mappedFileSizeCommitLog
        batch = self.config.haTransferBatchSize
        heartbeat = self.config.haSendHeartbeatInterval / 1000
        last_write = time.monotonic()
        t = self.table
        try:
            while not self._closed.is_set():
                wrote = t.load(Slot.WROTE)
                if nxt < wrote:
                    base = nxt - nxt % seg
                    size = min(wrote, base + seg, nxt + batch) - nxt
                    try:
                        f = self._file(base)
                    except FileNotFoundError:
                        return self.close(f"segment {offset_to_name(base)} was deleted by the cleaner before this slave "
                                          f"read it: the slave fell behind the master's oldest offset and cannot "
                                          f"catch up; wipe its store to bootstrap it afresh", logging.ERROR)
                    self.sock.sendall(frame_header(nxt, size))
                    sent = self.sock.sendfile(f, nxt - base, size)
                    if sent != size:
                        return self.close(f"segment {offset_to_name(base)} ended {size - sent} bytes early")
                    nxt += size
                    last_write = time.monotonic()
                    continue
                left = heartbeat - (time.monotonic() - last_write)
                if left <= 0:
                    self.sock.sendall(frame_header(nxt, 0))
                    last_write = time.monotonic()
                    continue
                t.wait_until_ge(Slot.WROTE, nxt + 1, left)
        except (OSError, ValueError) as e:
            self.close(f"write failed: {e}")
