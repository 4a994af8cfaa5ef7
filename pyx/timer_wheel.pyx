# cython: language_level=3
"""The timer service's enqueue (broker.server.timer.timer_message_service) over stored records,
in one kernel call per run of them: no Python object per timer.

`enqueue_records` walks the records of `span` (the timer topic's records as they lie back to
back in the commit log: a queue read's spans) from byte `pos`. For each it reads, from the record
(docs/formats.md §1), its queue offset, physical offset and size, and from its properties (as
decode_properties reads them: entries split on \\x02, a key and a value split on the first \\x01,
entries missing either skipped, the last of equal keys counting) TIMER_OUT_MS (the delivery time),
REAL_TOPIC and whether TIMER_DEL_UNIQKEY is there. Then, as TimerMessageService._enqueue does:

- a timer below the takeover's queue offset `past_qo` and due before its read time `past_ms` was
  delivered by the old master: skipped (counted);
- otherwise one 52-byte unit is appended to the timer log segment `log` (its first offset
  `log_base`, its size `log_size`, written up to `log_wrote`) and linked into its slot of the
  wheel (`wheel`, `slots` slots of 32 bytes): magic 1 (|4 for a delete marker), the write time
  `write_ms`, the delay from it, the record's physical offset and size, the Java hashCode of
  REAL_TOPIC; a time `roll_window` slots or more ahead is parked (|2) at the window's middle or
  edge (RocketMQ's roll).

The layouts are broker.store.timer_files' (RocketMQ's TimerLog and TimerWheel, big-endian).
Returns (status, pos, count, next queue offset, log_wrote): ENQ_DONE with pos at the span's end;
ENQ_PYTHON with pos at a record Python must take (no readable TIMER_OUT_MS, a time before
`read_ms` (due now: delivered), REAL_TOPIC not UTF-8, a delay past an int, not a message record);
ENQ_LOG_FULL with
pos at a record whose unit does not fit before the segment's 16-byte tail (Python rolls the log
and calls again). `count` records were taken before pos; next queue offset is one past the last
taken (-1: none).
"""
cimport cython
from ascii cimport ascii_parse_int
from buffers cimport Borrowed, borrow, check_range, give_back
from bytesex cimport get_be16, get_be32, get_be64, put_be32, put_be64
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp
from record cimport RECORD_MESSAGE_MAGIC, RECORD_SYSFLAG_BORNHOST_V6, RECORD_SYSFLAG_STOREHOST_V6
from utf8 cimport utf8_sequence


cdef extern from "string.h" nogil:
    void *memchr(const void *s, int c, size_t n)

cdef enum:
    ENQ_DONE_ = 0
    ENQ_PYTHON_ = 1
    ENQ_LOG_FULL_ = 2
    UNIT_SIZE_ = 52
    SLOT_SIZE_ = 32
    MIN_BLANK_ = 16
    MAGIC_DEFAULT = 1
    MAGIC_ROLL = 2
    MAGIC_DELETE = 4

ENQ_DONE = ENQ_DONE_
ENQ_PYTHON = ENQ_PYTHON_
ENQ_LOG_FULL = ENQ_LOG_FULL_


cdef struct TimerProps:
    int64_t out_ms
    const uint8_t *topic
    Py_ssize_t topic_len
    bint has_out
    bint out_ok
    bint has_topic
    bint delete


cdef inline bint read_long(const uint8_t *v, Py_ssize_t n, int64_t *out) noexcept nogil:
    """int() of an optional '-' and 1 to 18 digits; False for anything else (Python reads it)."""
    return ascii_parse_int(v, n, 18, out)


cdef inline bint key_is(const uint8_t *k, Py_ssize_t kn, const char *name, Py_ssize_t n) noexcept nogil:
    return kn == n and memcmp(k, name, n) == 0


cdef void timer_props(const uint8_t *p, Py_ssize_t n, TimerProps *t) noexcept nogil:
    cdef Py_ssize_t i = 0, end, k
    cdef const uint8_t *e
    cdef const uint8_t *sep
    t.has_out = t.out_ok = t.has_topic = t.delete = False
    t.topic = NULL
    t.topic_len = 0
    t.out_ms = 0
    while i < n:
        e = <const uint8_t *> memchr(p + i, 2, n - i)
        end = (e - p) if e != NULL else n
        sep = <const uint8_t *> memchr(p + i, 1, end - i)
        if sep != NULL and sep != p + i and sep + 1 != p + end:  # a key and a value
            k = sep - (p + i)
            if key_is(p + i, k, b"TIMER_OUT_MS", 12):
                t.has_out = True
                t.out_ok = read_long(sep + 1, p + end - sep - 1, &t.out_ms)
            elif key_is(p + i, k, b"REAL_TOPIC", 10):
                t.has_topic = True
                t.topic = sep + 1
                t.topic_len = p + end - sep - 1
            elif key_is(p + i, k, b"TIMER_DEL_UNIQKEY", 17):
                t.delete = True
        i = end + 1


cdef bint java_hash(const uint8_t *s, Py_ssize_t n, int32_t *out) noexcept nogil:
    """String.hashCode() of UTF-8 text (over its UTF-16 code units); False if not UTF-8."""
    cdef uint32_t h = 0, cp
    cdef Py_ssize_t i = 0, k
    while i < n:
        if s[i] < 0x80:
            h = 31 * h + s[i]
            i += 1
            continue
        k = utf8_sequence(s, n, i)
        if k < 0:
            return False
        if k == 2:
            cp = ((s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F)
        elif k == 3:
            cp = ((s[i] & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F)
        else:
            cp = ((s[i] & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F)
        if cp >= 0x10000:  # a surrogate pair
            cp -= 0x10000
            h = 31 * h + (0xD800 + (cp >> 10))
            h = 31 * h + (0xDC00 + (cp & 0x3FF))
        else:
            h = 31 * h + cp
        i += k
    out[0] = <int32_t> h
    return True


def topic_hash(bytes topic not None) -> int:
    """java_hash of UTF-8 `topic` (ValueError if it is not UTF-8)."""
    cdef int32_t h
    if not java_hash(<const uint8_t *> topic, len(topic), &h):
        raise ValueError("not UTF-8")
    return h


@cython.cdivision(True)
def enqueue_records(span, Py_ssize_t pos, wheel, int64_t slots, int64_t precision, log, int64_t log_base,
                    int64_t log_wrote, int64_t log_size, int64_t write_ms, int64_t read_ms, int64_t past_qo,
                    int64_t past_ms, int64_t roll_window) -> tuple:
    cdef Borrowed sv, wv, lv
    cdef const uint8_t *r
    cdef uint8_t *slot
    cdef uint8_t *u
    cdef int64_t total, qo, phys, delayed, count = 0, next_qo = -1, idx, first, last, rel
    cdef int64_t window = roll_window * precision
    cdef int32_t num, magic, hashed
    cdef uint32_t sys_flag
    cdef Py_ssize_t at, blen, tlen, plen, bh, sh
    cdef TimerProps t
    cdef int status = ENQ_DONE_
    if precision <= 0 or slots <= 0 or log_size < UNIT_SIZE_ + MIN_BLANK_:
        raise ValueError(f"precision {precision}, slots {slots} and log size {log_size} must be positive")
    borrow(span, &sv, False)
    try:
        borrow(wheel, &wv, True)
        try:
            borrow(log, &lv, True)
            try:
                check_range(pos, sv.size, sv.size)
                if wv.size < slots * SLOT_SIZE_ or lv.size < log_size:
                    raise ValueError(f"wheel of {wv.size} bytes for {slots} slots, or log of {lv.size} for {log_size}")
                if not log_base <= log_wrote <= log_base + log_size:
                    raise ValueError(f"log written to {log_wrote} outside [{log_base}, {log_base + log_size}]")
                while pos < sv.size:
                    r = sv.ptr + pos
                    if sv.size - pos < 52:
                        status = ENQ_PYTHON_
                        break
                    total = <int32_t> get_be32(r)
                    sys_flag = get_be32(r + 36)
                    bh = 20 if sys_flag & RECORD_SYSFLAG_BORNHOST_V6 else 8
                    sh = 20 if sys_flag & RECORD_SYSFLAG_STOREHOST_V6 else 8
                    at = 48 + bh + 8 + sh + 12
                    if get_be32(r + 4) != RECORD_MESSAGE_MAGIC or total < at + 7 or total > sv.size - pos:
                        status = ENQ_PYTHON_
                        break
                    blen = <int32_t> get_be32(r + at)
                    if blen < 0 or at + 4 + blen + 1 > total:
                        status = ENQ_PYTHON_
                        break
                    at += 4 + blen
                    tlen = r[at]
                    if tlen > 127 or at + 1 + tlen + 2 > total:
                        status = ENQ_PYTHON_
                        break
                    at += 1 + tlen
                    plen = <int16_t> get_be16(r + at)
                    if plen < 0 or at + 2 + plen != total:
                        status = ENQ_PYTHON_
                        break
                    timer_props(r + at + 2, plen, &t)
                    if not t.out_ok:
                        status = ENQ_PYTHON_
                        break
                    qo = <int64_t> get_be64(r + 20)
                    phys = <int64_t> get_be64(r + 28)
                    delayed = t.out_ms
                    if qo < past_qo and delayed < past_ms:
                        pass  # delivered by the master this one took over from
                    elif delayed < read_ms:
                        status = ENQ_PYTHON_  # its slot was read already: due now
                        break
                    else:
                        hashed = 0
                        if t.has_topic and not java_hash(t.topic, t.topic_len, &hashed):
                            status = ENQ_PYTHON_
                            break
                        rel = log_wrote - log_base
                        if rel + UNIT_SIZE_ + MIN_BLANK_ > log_size:
                            status = ENQ_LOG_FULL_
                            break
                        magic = MAGIC_DEFAULT | (MAGIC_DELETE if t.delete else 0)
                        if delayed - write_ms >= window:
                            magic |= MAGIC_ROLL
                            if delayed - write_ms - window < roll_window // 3 * precision:
                                delayed = write_ms + roll_window // 2 * precision
                            else:
                                delayed = write_ms + window
                        if not -2147483648 <= delayed - write_ms <= 2147483647:
                            status = ENQ_PYTHON_  # a delay the unit's int cannot hold: Python says so
                            break
                        idx = (delayed // precision) % slots
                        slot = wv.ptr + idx * SLOT_SIZE_
                        if <int64_t> get_be64(slot) != delayed // precision:
                            first, last, num = -1, -1, 0
                        else:
                            first, last = <int64_t> get_be64(slot + 8), <int64_t> get_be64(slot + 16)
                            num = <int32_t> get_be32(slot + 24)
                        u = lv.ptr + rel
                        put_be32(u, UNIT_SIZE_)
                        put_be64(u + 4, <uint64_t> last)
                        put_be32(u + 12, <uint32_t> magic)
                        put_be64(u + 16, <uint64_t> write_ms)
                        put_be32(u + 24, <uint32_t> <int32_t> (delayed - write_ms))
                        put_be64(u + 28, <uint64_t> phys)
                        put_be32(u + 36, <uint32_t> total)
                        put_be32(u + 40, <uint32_t> hashed)
                        put_be64(u + 44, 0)
                        put_be64(slot, <uint64_t> (delayed // precision))
                        put_be64(slot + 8, <uint64_t> (log_wrote if first == -1 else first))
                        put_be64(slot + 16, <uint64_t> log_wrote)
                        put_be32(slot + 24, <uint32_t> (num + 1))
                        put_be32(slot + 28, 0)
                        log_wrote += UNIT_SIZE_
                    count += 1
                    next_qo = qo + 1
                    pos += total
                return status, pos, count, next_qo, log_wrote
            finally:
                give_back(&lv)
        finally:
            give_back(&wv)
    finally:
        give_back(&sv)
