"""Pure-Python twin of broker.kernels.index_dispatch (tests only), written from docs/formats.md §2.1
and RocketMQ's IndexService.buildIndex / IndexFile.putKey / IndexHeader:

- records of transaction type PREPARED (0x4) or ROLLBACK (0xC) are not indexed;
- a record below the file's endPhyOffset (or at it, once the file holds an entry or has a
  non-zero end) was indexed before and is skipped, unless it is the one a full file cut short;
- keys, in order: UNIQ_KEY, then each non-empty space-separated token of KEYS, each as
  `topic#key`, hashed with Java's String.hashCode over UTF-16 units, made non-negative (abs;
  Integer.MIN_VALUE -> 0); slot = hash % slots;
- putKey: slot value kept only if 0 < v <= indexCount; timeDiff = (storeTs - beginTs) / 1000
  truncated, 0 when beginTs <= 0 or negative, at most INT_MAX; entry at header + slots*4 +
  indexCount*20; slot := indexCount; the first entry (indexCount <= 1) sets the begin fields;
  an empty slot counts in hashSlotCount; indexCount += 1; the end fields follow the entry.
- a file is full when indexCount >= indexNum: the pass stops and resumes in the next file with
  the record's remaining keys.
"""
from __future__ import annotations

import struct

HEADER, SLOT, ENTRY = 40, 4, 20
_HDR = struct.Struct(">qqqqii")
INT_MAX = 2**31 - 1


def java_hash(text: str) -> int:
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def index_key_hash(text: str) -> int:
    h = abs(java_hash(text))
    return 0 if h > INT_MAX else h


class IndexDispatcher:
    def __init__(self):
        self.f = None
        self.resume = (-1, 0)
        self.keys_indexed = 0

    def register(self, buf: bytearray, slots: int, num: int) -> None:
        self.f, self.slots, self.num = buf, slots, num
        bt, et, bp, ep, sc, ic = _HDR.unpack_from(buf, 0)
        self.h = [bt, et, bp, ep, sc, ic if ic > 0 else 1]

    @property
    def full(self) -> bool:
        return self.h[5] >= self.num

    def _keys(self, e, data: bytes) -> list[bytes]:
        out = []
        if e["uniq_pos"] >= 0 and e["uniq_len"] > 0:
            out.append(data[e["uniq_pos"]:e["uniq_pos"] + e["uniq_len"]])
        if e["keys_pos"] >= 0:
            out += [k for k in data[e["keys_pos"]:e["keys_pos"] + e["keys_len"]].split(b" ") if k]
        return out

    def _put(self, text: str, phys: int, ts: int) -> None:
        bt, et, bp, ep, sc, ic = self.h
        kh = index_key_hash(text)
        sp = HEADER + (kh % self.slots) * SLOT
        sv = struct.unpack_from(">i", self.f, sp)[0]
        if sv <= 0 or sv > ic:
            sv = 0
        diff = 0 if bt <= 0 or ts < bt else min(INT_MAX, (ts - bt) // 1000)
        struct.pack_into(">iqii", self.f, HEADER + self.slots * SLOT + ic * ENTRY, kh, phys, diff, sv)
        struct.pack_into(">i", self.f, sp, ic)
        if ic <= 1:
            bt, bp = ts, phys
        if sv == 0:
            sc += 1
        self.h = [bt, ts, bp, phys, sc, ic + 1]
        _HDR.pack_into(self.f, 0, *self.h)
        self.keys_indexed += 1

    def dispatch(self, entries, topics: list[bytes], data: bytes, start: int, end: int) -> int:
        for i in range(start, end):
            e = {k: int(entries[i][k]) for k in ("phys_offset", "store_ts", "sys_flag", "topic_idx", "uniq_pos",
                                                  "uniq_len", "keys_pos", "keys_len")}
            if e["sys_flag"] & 0xC in (0x4, 0xC):
                continue
            keys = self._keys(e, data)
            if not keys:
                continue
            phys = e["phys_offset"]
            if phys == self.resume[0]:
                skip = self.resume[1]
            else:
                endp = self.h[3]
                if phys < endp or (phys == endp and (self.h[5] > 1 or endp > 0)):
                    continue
                skip = 0
            topic = topics[e["topic_idx"]].decode("utf-8", "replace")
            for n, k in enumerate(keys):
                if n < skip:
                    continue
                if self.full:
                    self.resume = (phys, n)
                    return i
                self._put(topic + "#" + k.decode("utf-8", "replace"), phys, e["store_ts"])
            if phys == self.resume[0]:
                self.resume = (-1, 0)
        return end


# -- running a dispatcher over index files that fill up (the hypothesis test and the fuzz check) ----
def new_index_file(kind: str, slots: int, num: int, prev=None):
    """An empty index file (a numpy array for the kernel, a bytearray for the twin) starting where
    `prev` ended, as IndexFile(..., endPhyOffset, endTimestamp) makes the next one."""
    import numpy as np
    from broker.kernels.index_dispatch import index_file_size
    size = index_file_size(slots, num)
    f = np.zeros(size, np.uint8) if kind == "kernel" else bytearray(size)
    if prev is not None:
        end_ts, end_phy = struct.unpack_from(">qxxxxxxxxq", bytes(prev[:32]), 8)
        if end_phy > 0:
            struct.pack_into(">qq", f, 16, end_phy, end_phy)
        if end_ts > 0:
            struct.pack_into(">qq", f, 0, end_ts, end_ts)
    return f


def dispatch_all(kind: str, d, dispatch, slots: int, num: int, files: list, count: int) -> None:
    """dispatch(start, end) until every record is done, registering a new file each time one fills."""
    from broker.kernels.codec import MappedBuffer
    i = 0
    while True:
        i = dispatch(i, count)
        if i >= count:
            return
        files.append(new_index_file(kind, slots, num, files[-1]))
        d.register(MappedBuffer(files[-1], True) if kind == "kernel" else files[-1], slots, num)
