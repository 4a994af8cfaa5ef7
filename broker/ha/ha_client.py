"""HAClient, the HA process's part on a slave (broker.ha.ha_process): the slave's only commit-log writer.

Connects to the master's HA port (reconnecting with back-off), reports its log's end at once and
then after every append and at least every haSendHeartbeatInterval. `dispatch_read_request`
(kernel) parses the master's frames in the receive buffer and checks each continues our log;
each frame's bytes are copied once into the mapped segment. `wrote` is published only at whole
records (`record_boundary`, kernel), so reput, flush and recovery never see half a record; the
received end, which may lie inside one, is what we acknowledge, as RocketMQ's slave does.

A failed fdatasync of our commit log (the flush service counts it in FLUSH_ERRORS) ends
replication until the slave is restarted: the kernel may have dropped the pages the failed sync
covered, so this log no longer holds what we acknowledged past the last good flush, and a later
sync that succeeds proves nothing. The client then writes no more frames, sends no more
acknowledgements (the check comes before each append and each report, so nothing received after
the failure is ever counted by a SYNC_MASTER), and closes the link: the master sees no slave and
answers SYNC_MASTER sends SLAVE_NOT_AVAILABLE rather than counting on this disk. The restart
recovers the log by CRC from what is on disk and asks the master for the rest.
"""
from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time

from broker.store import ha_master_address as master_address
from broker.kernels.ha import (HA_HEADER, HAFrameError, dispatch_read_request, reallocate_byte_buffer,
                               record_boundary)
from broker.ha.ha_connection import HELLO_MAGIC
from broker.services.process import notify
from broker.store.durable import pwrite_all
from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.offset_table import Slot

log = logging.getLogger("ha")
READ_BUFFER = 4 * 1024 * 1024  # RocketMQ's slave buffer; grown to hold a configured bigger batch


class LinkDropped(Exception):
    """This link is unusable (mismatch, silence, a bad frame): reconnect after a pause."""


class SlaveDiskFailed(Exception):
    """Our commit log's fdatasync failed: replication stops until the slave is restarted."""


class HAClient:
    def __init__(self, config, notify_fd: int, table):
        self.config = config
        self.table = table
        self.notify_fd = notify_fd
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sock: socket.socket | None = None
        # Segments are reserved (fallocate), not warmed with zeros: replicated bytes arrive in large
        # frames written once with pwrite, and zeros written ahead would double a catch-up's disk
        # traffic (fresh slave catch-up, 1 MiB frames: 290 MB/s warmed + stores through the map,
        # 470-490 MB/s reserved + pwrite, 390-520 reserved + map).
        self.log = MappedFileQueue(config.commitlog_dir, config.mappedFileSizeCommitLog, writable=True, warm=False)
        size = max(READ_BUFFER, 2 * (config.haTransferBatchSize + HA_HEADER))
        self.buf = bytearray(size)
        self._fds: dict[int, int] = {}  # segment base -> descriptor the frames are written through
        self.received = 0  # end of the bytes we hold (reported to the master)
        self.boundary = 0  # end of the last whole record (published as `wrote`)

    # -- the log --------------------------------------------------------------------------------
    def _append(self, phy: int, data: memoryview) -> None:
        mf = self.log.find(phy)
        if mf is None:
            base = phy - phy % self.log.file_size
            last = self.log.last()
            if last is not None and base != last.end:
                raise LinkDropped(f"the master sent offset {phy}, not in or after our last segment ending {last.end}")
            mf = self.log.roll(base)
            self.log.drop_before(self.table.load(Slot.MIN_OFFSET))  # segments our cleaner deleted
        if phy + len(data) > mf.end:
            raise LinkDropped(f"a frame at {phy} of {len(data)} bytes crosses our segment end {mf.end}: "
                              f"mappedFileSizeCommitLog differs from the master's")
        # The one copy, by the kernel: pwrite fills the page cache the maps of reput and the broker
        # share, without a write fault per page as a store through our own map would take (a fresh
        # slave's catch-up ran at half the speed that way).
        fd = self._fds.get(mf.base)
        if fd is None:
            for old in [b for b in self._fds if b < mf.base]:
                os.close(self._fds.pop(old))
            fd = self._fds[mf.base] = os.open(mf.path, os.O_RDWR)
        pwrite_all(fd, data, phy - mf.base)  # a short write continues where it stopped

    def _advance_boundary(self) -> None:
        b = self.boundary
        while b < self.received:
            mf = self.log.find(b)
            if mf is None:
                break
            try:
                rel = record_boundary(mf.mv, b - mf.base, min(self.received, mf.end) - mf.base)
            except ValueError as e:
                raise LinkDropped(f"replicated bytes at {b} are not a record: {e}") from None
            nb = mf.base + rel
            if nb == b:
                break
            b = nb
        if b != self.boundary:
            self.boundary = b
            self.table.store(Slot.WROTE, b)  # store() wakes the flush service sleeping on it
            self.table.add(Slot.REPUT_WAKE, 1)  # and the reput, once per whole-records batch

    def _check_disk(self) -> None:
        """Before every append and every acknowledgement: after a failed sync neither may happen."""
        if self.table.load(Slot.FLUSH_ERRORS):
            raise SlaveDiskFailed(f"the commit log's fdatasync failed (flushed to {self.table.load(Slot.FLUSHED)}, "
                                  f"received to {self.received})")

    # -- the link -------------------------------------------------------------------------------
    def _report(self, sock: socket.socket) -> None:
        self._check_disk()
        sock.sendall(self.received.to_bytes(8, "big"))

    def _serve(self, sock: socket.socket, peer: str) -> None:
        cfg = self.config
        heartbeat = cfg.haSendHeartbeatInterval / 1000
        silent_max = cfg.haHousekeepingInterval / 1000
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(heartbeat)
        mv = memoryview(self.buf)
        max_body = len(self.buf) - HA_HEADER
        fill = 0
        # An empty slave takes the master's first offset (its oldest); otherwise each frame must
        # continue exactly where our log ends.
        expected = self.received if self.received or self.log.files else -1
        if cfg.enableControllerMode:
            t = self.table  # the broker's id and the epoch it follows, as it switched roles
            sock.sendall(struct.pack(">qqq", HELLO_MAGIC, t.load(Slot.HA_BROKER_ID), t.load(Slot.HA_EPOCH)))
        self._report(sock)
        last_report = last_read = time.monotonic()
        self.table.store(Slot.HA_LINK, 1)
        log.info("linked to master %s; our log ends at %d", peer, self.received)
        while True:
            try:
                n = sock.recv_into(mv[fill:])
            except socket.timeout:
                if time.monotonic() - last_read > silent_max:
                    raise LinkDropped(f"nothing from the master for {cfg.haHousekeepingInterval} ms") from None
                n = -1
            if n == 0:
                raise LinkDropped("the master closed the link")
            now = time.monotonic()
            if n > 0:
                last_read = now
                fill += n
                try:
                    frames, pos, expected, mismatch = dispatch_read_request(self.buf, 0, fill, expected, max_body)
                except HAFrameError as e:
                    raise LinkDropped(str(e)) from None
                if frames:
                    self._check_disk()
                for phy, at, size in frames:
                    self._append(phy, mv[at:at + size])
                if frames:
                    self.received = expected
                    self.table.store(Slot.HA_RECEIVED, expected)
                    self._advance_boundary()
                    self._report(sock)
                    last_report = now
                if mismatch >= 0:
                    raise LinkDropped(f"the master pushed offset {mismatch} but our log ends at {expected}")
                fill = reallocate_byte_buffer(self.buf, pos, fill)
            if now - last_report >= heartbeat:
                self._report(sock)
                last_report = now

    def serve(self) -> None:
        """The slave's part until stop(): follow the master named in runtime/ha_master (run in a
        thread of the HA process, broker.ha.ha_process, which starts another on a new address)."""
        t = self.table
        cfg = self.config
        self.log.load()
        self.log.prepare_ahead()  # the segment the first frames go to, made off the receive path
        # the broker recovered the log to its last whole record (or wrote it) before starting us
        self.received = self.boundary = t.load(Slot.WROTE)
        t.store(Slot.HA_RECEIVED, self.received)
        pause, said = 0.1, None
        while not self._stopping.is_set():
            if t.load(Slot.FLUSH_ERRORS):
                self._stop_for_disk(None)
                return
            addr = master_address.read(cfg.storePathRootDir, cfg.haMasterAddress)
            if addr is None:
                self._stopping.wait(5.0)  # the broker bumps HA_MASTER when it learns one: we are replaced
                continue
            peer = f"{addr[0]}:{addr[1]}"
            sock = socket.socket(socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, socket.SOCK_STREAM)
            with self._lock:
                self._sock = sock
                stopping = self._stopping.is_set()
            try:
                if stopping:
                    return
                try:
                    sock.settimeout(3)
                    sock.connect(addr)  # stop() shuts the socket down: a connect under way fails at once
                except OSError as e:
                    if self._stopping.is_set():
                        return
                    if said != (peer, str(e)):
                        log.warning("cannot reach master %s: %s (retrying)", peer, e)
                        said = (peer, str(e))
                    self._stopping.wait(pause)
                    pause = min(pause * 2, 5.0)
                    continue
                said, pause = None, 0.1
                try:
                    self._serve(sock, peer)
                except SlaveDiskFailed as e:
                    self._stop_for_disk(e)
                    return
                except (LinkDropped, OSError) as e:
                    if self._stopping.is_set():
                        return
                    log.warning("link to master %s dropped: %s", peer, e)
                    pause = 1.0  # the same cause would recur at once: do not spin on it
            finally:
                t.store(Slot.HA_LINK, 0)
                with self._lock:
                    self._sock = None
                sock.close()
            self._stopping.wait(pause)

    def _stop_for_disk(self, e: SlaveDiskFailed | None) -> None:
        log.error("%s: this slave stops replicating and acknowledges nothing more to its master; it "
                  "must be restarted (it then recovers its commit log by CRC from what is on disk and "
                  "catches up)", e or "the commit log's fdatasync failed")
        self.table.store(Slot.HA_LINK, 0)
        notify(self.notify_fd)

    def stop(self) -> None:
        """From another thread: serve() returns soon, between two frames (a blocked recv or
        connect fails on the shut socket); after it the log is written to whole records only."""
        with self._lock:
            self._stopping.set()
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """After serve() returned."""
        self.table.store(Slot.HA_LINK, 0)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self.log.close()
        notify(self.notify_fd)
        log.info("HA client stopped: log ends at %d (whole records to %d)", self.received, self.boundary)
