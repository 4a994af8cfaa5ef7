"""Pulled records → one pyarrow.RecordBatch of ARROW_SCHEMA, without Python work per message.

A FOUND pull body is the broker's stored records back to back (RocketMQ's v1 layout; see
docs/spark.md and the client-protocol reference). The project's Cython Scanner walks the chain
of record sizes and hands back, per record, its position, size, queue id and offset, sysFlag
and store time; everything else sits at a fixed place relative to those and is gathered with
numpy for all records at once:

    0 size | 4 magic | 8 bodyCRC | 12 queueId | 16 flag | 20 queueOffset | 28 commitLogOffset
    36 sysFlag | 40 bornTimestamp | 48 bornHost (8, or 20 with sysFlag 0x10) | storeTimestamp
    storeHost (8, or 20 with 0x20) | reconsumeTimes | preparedTxOffset | bodyLen | body
    topicLen (1) | topic | propertiesLen (2) | properties

Bodies and property strings become Arrow binary *views* over the one buffer of records (a view
names any slice, gaps between slices are no problem), then one C++ cast copies them into the
plain binary/string layout Spark wants. Properties are split into the map column by pyarrow's
compute kernels, TAGS and KEYS looked up from that map; the msgId hex is a numpy table lookup.
Only rarities take a Python loop: bodies the producer compressed (they are inflated, as the
client does) and IPv6 store hosts (their msgId is longer).
"""
from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.kernels.codec import FIXED_LEN_V4, SCAN_END, Scanner, msg_id
from broker.spark.errors import RocketMQSourceError
from broker.spark.schema import ARROW_SCHEMA

COMPRESSED, BORNHOST_V6, STOREHOST_V6 = 0x1, 0x10, 0x20
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
# byte → its two upper-case hex digits as one little-endian uint16 (first digit in the low byte)
_HEX2 = (_HEX[np.arange(256) >> 4].astype("<u2") | (_HEX[np.arange(256) & 0xF].astype("<u2") << 8)).astype("<u2")
_MAP_TYPE = ARROW_SCHEMA.field("properties").type
_TS_TYPE = ARROW_SCHEMA.field("bornTimestamp").type
_SCAN_CHUNK = 65536
# row L: 0xFF in the first L of 12 bytes, as three int32 words (a long value's row is 12: all kept)
_INLINE_MASK = (np.arange(12)[None, :] < np.arange(13)[:, None]).astype(np.uint8).__mul__(255).view("<i4")


def _unaligned(u8: np.ndarray, dtype: str) -> np.ndarray:
    """An array of `dtype` starting at *every byte* of u8 (stride 1): element i is the value in
    u8[i:i + itemsize], so one fancy index reads a field at arbitrary record positions."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(len(u8) - size + 1, 0),), dtype=dtype, buffer=u8, offset=0, strides=(1,))


def _be(u8: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of `width` bytes at every position of `pos`, as int64."""
    return _unaligned(u8, f">i{width}")[pos].astype(np.int64)


def _slices(u8: np.ndarray, data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    """u8[starts[i]:starts[i]+lengths[i]] for every i as an Arrow array of `typ` (binary or string).

    Built as binary_view, 16 bytes per value: the int32 length, then either the bytes themselves
    (up to 12, zero-padded) or a 4-byte prefix, buffer index 0 and the offset into `data`; then
    cast to `typ`, which copies the bytes in C++ (and checks UTF-8 for string). Both layouts
    start with the value's first 4 bytes, so the three words after the length are read at
    start, start+4 and start+8 for every value and kept or replaced as its length says."""
    if len(u8) < 16:  # too short for word reads: a padded copy (tiny)
        u8 = np.concatenate([u8, np.zeros(16, np.uint8)])
    n = len(starts)
    words = _unaligned(u8, "<i4")
    last = len(words) - 1
    short = lengths <= 12
    views = np.empty((n, 4), dtype="<i4")
    views[:, 0] = lengths
    views[:, 1] = words[np.minimum(starts, last)]
    views[:, 2] = np.where(short, words[np.minimum(starts + 4, last)], 0)
    views[:, 3] = np.where(short, words[np.minimum(starts + 8, last)], starts)
    # inline bytes past the length must be zero (a long value keeps all: its row of ones)
    views[:, 1:4] &= _INLINE_MASK[np.minimum(lengths, 12)]
    tail = np.flatnonzero(short & (starts + 12 > len(u8)))
    for i in tail:  # the last few bytes of the buffer, where the clipped word reads were wrong
        raw = bytes(u8[starts[i]:starts[i] + lengths[i]]).ljust(12, b"\0")
        views[i, 1:4] = np.frombuffer(raw, dtype="<i4")
    arr = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), data])
    return arr.cast(typ)


def _properties(props: pa.Array) -> pa.MapArray:
    """`k\\x01v\\x02k\\x01v[\\x02]` per row → map<string, string>, as decode_properties reads it
    (and Java's string2messageProperties): pieces split at \\x02, each at its first \\x01; a pair
    needs a key and a value, other pieces are skipped.

    Done on the rows' bytes laid end to end (`props` is a binary array): the separators are
    found with numpy for all rows at once, pieces are the spans between separators and row
    ends, and keys and values are slices of the same bytes."""
    n = len(props)
    offsets_buf, data_buf = props.buffers()[1], props.buffers()[2]
    row_off = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1).astype(np.int64)
    length = int(row_off[-1])
    # a copy with 12 spare zero bytes after the end: no key or value is in the buffer's last 12
    pdata = np.zeros(length + 12, dtype=np.uint8)
    if length:
        pdata[:length] = np.frombuffer(data_buf, dtype=np.uint8, count=length)
    data_buf = pa.py_buffer(pdata)
    # piece boundaries: every \x02 and every row end, in order; a piece starts after a \x02 or
    # at its row's start (= the previous row's end)
    seps = np.flatnonzero(pdata[:length] == 2)
    bounds = np.concatenate([seps, row_off[1:]])
    is_sep = np.concatenate([np.ones(len(seps), bool), np.zeros(n, bool)])
    order = np.argsort(bounds, kind="stable")  # a \x02 ending a row sorts before that row's end
    bounds, is_sep = bounds[order], is_sep[order]
    starts = np.empty_like(bounds)
    if len(bounds):
        starts[0] = 0
        starts[1:] = bounds[:-1] + is_sep[:-1]
    ones = np.flatnonzero(pdata[:length] == 1)
    if len(ones):  # the first \x01 at or after each piece's start
        i = np.searchsorted(ones, starts)
        first1 = np.where(i < len(ones), ones[np.minimum(i, len(ones) - 1)], -1)
    else:
        first1 = np.full(len(starts), -1)
    ok = (first1 > starts) & (first1 + 1 < bounds)  # a \x01 in the piece, a key before, a value after
    starts, ends, first1 = starts[ok], bounds[ok], first1[ok]
    rows = np.searchsorted(row_off[1:], ends, side="left")  # the row each pair belongs to
    counts = np.bincount(rows, minlength=n)
    map_off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=map_off[1:])
    try:
        k = _slices(pdata, data_buf, starts, first1 - starts, pa.string())
        v = _slices(pdata, data_buf, first1 + 1, ends - first1 - 1, pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decoded with replacement characters, as the client does
        raw = pdata.tobytes()
        k = pa.array([raw[a:b].decode("utf-8", "replace") for a, b in zip(starts, first1)], pa.string())
        v = pa.array([raw[a + 1:b].decode("utf-8", "replace") for a, b in zip(first1, ends)], pa.string())
    entries = pa.StructArray.from_arrays([k, v], fields=[_MAP_TYPE.key_field, _MAP_TYPE.item_field])
    return pa.Array.from_buffers(_MAP_TYPE, n, [None, pa.py_buffer(map_off)], children=[entries])


def _msg_ids(u8: np.ndarray, pos: np.ndarray, store_host: np.ndarray, v6: np.ndarray) -> pa.Array:
    """offsetMsgId: upper-case hex of store host (ip + port) and the record's commit-log offset."""
    n = len(pos)
    if v6.any():  # 56 hex digits instead of 32: rare enough for a loop
        host_len = np.where(v6, 20, 8)
        return pa.array([msg_id(u8[h:h + hl].tobytes(), int(p)) for h, hl, p in
                         zip(store_host, host_len, _be(u8, pos + 28, 8))], pa.string())
    eight = _unaligned(u8, "<u8")  # 8 bytes moved as one word, their order kept
    raw = np.empty((n, 2), dtype="<u8")
    raw[:, 0], raw[:, 1] = eight[store_host], eight[pos + 28]
    hexed = _HEX2[raw.view(np.uint8)].view(np.uint8)  # (n, 16) bytes → (n, 16) digit pairs → (n, 32)
    offsets = np.arange(0, 32 * (n + 1), 32, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(hexed)])


def _scan(data: bytes) -> tuple[np.ndarray, list[bytes]]:
    cap = min(_SCAN_CHUNK, len(data) // FIXED_LEN_V4 + 1)  # a record has at least this many bytes
    scanner = Scanner(cap)
    parts, pos = [], 0
    while pos < len(data):
        count, pos, status = scanner.scan(data, pos, len(data), 0, False, cap)
        parts.append(scanner.entries[:count].copy())
        if status != SCAN_END or count == 0 and pos < len(data):
            raise RocketMQSourceError(f"pulled records are corrupt at byte {pos} of {len(data)}: "
                                      f"{scanner.reason or f'scan status {status}'}")
    entries = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return entries, scanner.topics


def records_to_batch(data: bytes, broker_name: str, lo: int, hi: int,
                     tags: frozenset[str] | None = None) -> pa.RecordBatch | None:
    """The records of `data` whose queue offset is in [lo, hi) (and whose tag is in `tags`, when
    given) as one RecordBatch; None when none is."""
    if not data:
        return None
    entries, topics = _scan(data)
    qo = entries["queue_offset"]
    if len(qo) and (qo[0] < lo or qo[-1] >= hi):  # a pull may start before or run past the range
        entries = entries[(qo >= lo) & (qo < hi)]
    n = len(entries)
    if n == 0:
        return None
    u8 = np.frombuffer(data, dtype=np.uint8)
    buf = pa.py_buffer(data)
    pos = entries["phys_offset"]  # scanned with base offset 0: the position in `data`
    size = entries["size"].astype(np.int64)
    sys_flag = entries["sys_flag"]
    h1 = np.where(sys_flag & BORNHOST_V6, 20, 8)
    h2 = np.where(sys_flag & STOREHOST_V6, 20, 8)
    store_host = pos + 56 + h1
    body_len = _be(u8, pos + 68 + h1 + h2, 4)
    body_start = pos + 72 + h1 + h2
    topic_len = u8[body_start + body_len].astype(np.int64)
    props_start = body_start + body_len + 3 + topic_len
    props_len = pos + size - props_start

    body = _slices(u8, buf, body_start, body_len, pa.binary())
    compressed = np.flatnonzero(sys_flag & COMPRESSED)
    if len(compressed):  # compression is end to end: inflate as the client's decoder does
        values = body.to_pylist()
        for i in compressed:
            try:
                values[i] = zlib.decompress(values[i])
            except zlib.error as e:
                raise RocketMQSourceError(f"message at queue offset {int(entries['queue_offset'][i])} is flagged "
                                          f"compressed but does not inflate: {e}") from None
        body = pa.array(values, pa.binary())
    props = _properties(_slices(u8, buf, props_start, props_len, pa.binary()))

    topic_names = pa.array([t.decode("utf-8", "replace") for t in topics], pa.string())
    topic = pa.DictionaryArray.from_arrays(pa.array(entries["topic_idx"]), topic_names).dictionary_decode()
    born = _be(u8, pos + 40, 8) * 1000
    stored = entries["store_ts"].astype(np.int64) * 1000
    batch = pa.RecordBatch.from_arrays([
        topic,
        pa.repeat(pa.scalar(broker_name, pa.string()), n),
        pa.array(entries["queue_id"].astype(np.int32)),
        pa.array(entries["queue_offset"].astype(np.int64)),
        _msg_ids(u8, pos, store_host, (sys_flag & STOREHOST_V6) != 0),
        pc.map_lookup(props, pa.scalar("KEYS"), "last"),
        pc.map_lookup(props, pa.scalar("TAGS"), "last"),
        props,
        body,
        pa.Array.from_buffers(_TS_TYPE, n, [None, pa.py_buffer(born)]),
        pa.Array.from_buffers(_TS_TYPE, n, [None, pa.py_buffer(stored)]),
    ], schema=ARROW_SCHEMA)
    if tags is not None:  # the broker filters by tag hash; equal hashes of other tags go here
        batch = batch.filter(pc.fill_null(pc.is_in(batch.column("tags"), pa.array(sorted(tags), pa.string())), False))
        if batch.num_rows == 0:
            return None
    return batch
