"""Pulled records → one pyarrow.RecordBatch of ARROW_SCHEMA, without Python work per message.

A FOUND pull body is the broker's stored records back to back (RocketMQ's v1 layout; see
docs/spark.md and docs/formats.md §1). The pulled-records kernel (broker.kernels.pulled.RecordColumns)
walks every chunk once and writes each column in Arrow's own layout as it goes: queue ids,
offsets and timestamps as little-endian integers, msgId hex, bodies (inflated when the producer
compressed them, as the client does), the properties map's keys and values as string columns
with their offsets, TAGS and KEYS with a validity byte per row. Here those buffers are wrapped
as Arrow arrays without a copy. The chunks are scanned where they are: no join of the pulls.

Only a rarity takes a Python loop: property keys or values that are not UTF-8 (Arrow strings must
be), decoded with replacement characters as the client decodes them.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.kernels.pulled import PulledRecordsError, RecordColumns
from broker.spark.errors import RocketMQSourceError
from broker.spark.schema import ARROW_SCHEMA

_MAP_TYPE = ARROW_SCHEMA.field("properties").type
_TS_TYPE = ARROW_SCHEMA.field("bornTimestamp").type


def _strings(n: int, offsets, data, valid=None, typ: pa.DataType = pa.string()) -> pa.Array:
    validity = None
    if valid is not None:
        mask = np.frombuffer(valid, dtype=np.uint8)
        if not mask.all():
            validity = pa.py_buffer(np.packbits(mask, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def _replaced(arr: pa.Array) -> pa.Array:
    """A binary array's values as strings, bad UTF-8 replaced (the client's decode)."""
    return pa.array([None if v is None else v.decode("utf-8", "replace") for v in arr.to_pylist()], pa.string())


class ColumnBuffers:
    """One reader's column buffers, reused batch after batch: memory a batch already touched
    takes a later one's rows without faulting pages in again. A buffer an Arrow array still holds
    refuses to be reset (WriteBuffer counts its views), and Spark's loop holds the batch it
    wrote while it asks for the next one: so a few sets take turns, and a new set is made when
    none is free."""

    KEEP = 3

    def __init__(self):
        self.sets: list[RecordColumns] = []

    def take(self) -> RecordColumns:
        for i, cols in enumerate(self.sets):
            try:
                cols.reset()
            except BufferError:
                continue
            self.sets.append(self.sets.pop(i))  # the least recently used is tried first next time
            return cols
        cols = RecordColumns()
        self.sets.append(cols)
        if len(self.sets) > self.KEEP:
            self.sets.pop(0)
        return cols


def records_to_batch(data, broker_name: str, lo: int, hi: int, tags: frozenset[str] | None = None,
                     buffers: ColumnBuffers | None = None) -> pa.RecordBatch | None:
    """The records of `data` (one pulled body, or a list of them) whose queue offset is in
    [lo, hi) (and whose tag is in `tags`, when given) as one RecordBatch; None when none is.
    `buffers`: where to build the columns (a reader's, reused), else new ones."""
    chunks = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    cols = buffers.take() if buffers is not None else RecordColumns()
    cols.reserve(sum(len(c) for c in chunks))
    try:
        for chunk in chunks:
            cols.add(chunk, lo, hi)
    except PulledRecordsError as e:
        raise RocketMQSourceError(f"pulled records are corrupt: {e}") from None
    n = cols.rows
    if n == 0:
        return None
    b = cols.buffers()

    def ints(name: str, typ: pa.DataType) -> pa.Array:
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(b[name])])

    m = len(b["key_offsets"]) // 4 - 1
    if cols.utf8:
        k = _strings(m, b["key_offsets"], b["key_data"])
        v = _strings(m, b["value_offsets"], b["value_data"])
        keys = _strings(n, b["keys_offsets"], b["keys_data"], b["keys_valid"])
        tag = _strings(n, b["tags_offsets"], b["tags_data"], b["tags_valid"])
    else:
        k = _replaced(_strings(m, b["key_offsets"], b["key_data"], typ=pa.binary()))
        v = _replaced(_strings(m, b["value_offsets"], b["value_data"], typ=pa.binary()))
        keys = _replaced(_strings(n, b["keys_offsets"], b["keys_data"], b["keys_valid"], pa.binary()))
        tag = _replaced(_strings(n, b["tags_offsets"], b["tags_data"], b["tags_valid"], pa.binary()))
    entries = pa.StructArray.from_arrays([k, v], fields=[_MAP_TYPE.key_field, _MAP_TYPE.item_field])
    props = pa.Array.from_buffers(_MAP_TYPE, n, [None, pa.py_buffer(b["map_offsets"])], children=[entries])
    topic_names = pa.array([t.decode("utf-8", "replace") for t in cols.topics], pa.string())
    topic = pa.DictionaryArray.from_arrays(ints("topic_idx", pa.int32()), topic_names).dictionary_decode()
    batch = pa.RecordBatch.from_arrays([
        topic,
        pa.repeat(pa.scalar(broker_name, pa.string()), n),
        ints("queue_id", pa.int32()),
        ints("queue_offset", pa.int64()),
        _strings(n, b["msg_id_offsets"], b["msg_id_data"]),
        keys,
        tag,
        props,
        _strings(n, b["body_offsets"], b["body_data"], typ=pa.binary()),
        ints("born_ts", _TS_TYPE),
        ints("store_ts", _TS_TYPE),
    ], schema=ARROW_SCHEMA)
    if tags is not None:  # the broker filters by tag hash; equal hashes of other tags go here
        batch = batch.filter(pc.fill_null(pc.is_in(batch.column("tags"), pa.array(sorted(tags), pa.string())), False))
        if batch.num_rows == 0:
            return None
    return batch
