# Interface of the commit-log record codec (RocketMQ 4.x stored message, V1 layout).
#
#  off  field                      bytes   (IPv4 hosts; each IPv6 host adds 12)
#    0  TOTALSIZE                   4
#    4  MAGICCODE  0xDAA320A7       4
#    8  BODYCRC    crc32 & 0x7FFFFFFF
#   12  QUEUEID                     4
#   16  FLAG                        4
#   20  QUEUEOFFSET                 8
#   28  PHYSICALOFFSET              8
#   36  SYSFLAG                     4
#   40  BORNTIMESTAMP               8
#   48  BORNHOST   ip + port        8 | 20
#   56  STORETIMESTAMP              8
#   64  STOREHOST  ip + port        8 | 20
#   72  RECONSUMETIMES              4
#   76  PREPAREDTRANSACTIONOFFSET   8
#   84  BODYLEN + body              4 + n
#       TOPICLEN (signed byte) + topic, PROPLEN (signed short) + properties
# End of segment: [remaining:4][0xCBD43194:4], the rest of the segment is unused.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

# The constants of this layout are in record.h / record.pxd (shared by every kernel).

cdef enum ScanStatus:
    SCAN_END = 0        # reached `end` exactly (or max_records)
    SCAN_BLANK = 1      # end-of-segment blank at next_pos
    SCAN_PARTIAL = 2    # record at next_pos not complete before `end`
    SCAN_ZERO = 3       # unwritten (zero) space at next_pos
    SCAN_CORRUPT = 4    # anything else wrong at next_pos

# One dispatch entry per scanned record; mirrored by DISPATCH_DTYPE in codec.pyx.
cdef packed struct DispatchEntry:
    int64_t phys_offset
    int64_t queue_offset
    int64_t tag_hash
    int64_t store_ts
    int64_t keys_pos      # position in the scanned buffer of the KEYS value, -1 if none
    int64_t uniq_pos      # position of the UNIQ_KEY value, -1 if none
    int32_t size
    int32_t queue_id
    int32_t sys_flag
    int32_t topic_idx     # index into Scanner.topics
    int32_t keys_len
    int32_t uniq_len


cdef class MappedBuffer:
    """A buffer (a segment's numpy.memmap, a bytearray) held once so the kernels
    get its pointer without re-acquiring it per call."""
    cdef Py_buffer view
    cdef uint8_t *ptr
    cdef readonly Py_ssize_t size
    cdef readonly bint writable
    cdef readonly object obj


cdef class Scanner:
    cdef dict _topic_ids
    cdef readonly list topics
    cdef readonly object entries        # numpy array of DISPATCH_DTYPE, capacity = max_records
    cdef DispatchEntry *_out
    cdef Py_ssize_t _cap
    cdef readonly str reason            # why the last scan stopped with SCAN_CORRUPT
    cdef const uint8_t *_last_topic
    cdef int _last_topic_len
    cdef int32_t _last_topic_idx
    cdef int32_t _intern_topic(self, const uint8_t *p, int n) except -1
    cdef tuple _scan_buf(self, buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset, bint check_crc,
                         Py_ssize_t max_records, bint entries)
    cdef tuple _scan(self, const uint8_t *base, Py_ssize_t pos, Py_ssize_t end, int64_t base_offset,
                     bint check_crc, Py_ssize_t max_records, bint entries=*)


cpdef int64_t java_string_hash(const uint8_t[::1] s) except? -1
cdef int64_t java_hash_ptr(const uint8_t *p, Py_ssize_t n) except? -1
cdef int64_t java_hash_from(uint32_t seed, const uint8_t *p, Py_ssize_t n) except? -1
cpdef uint32_t crc32(const uint8_t[::1] data) noexcept


# What Appender.append_c reports of the record it wrote.
cdef struct AppendOut:
    int64_t phys
    int64_t queue_offset
    int64_t store_ts
    int32_t size


cdef class QueueState:
    cdef readonly bytes topic
    cdef readonly int32_t queue_id
    cdef public int64_t next_offset     # the queue offset the next message gets
    cdef public int64_t last_end        # commit-log end of the queue's last message (0: none in this run)
    cdef public int32_t touched         # set by the send path when it appended (for held pulls)


cdef class Appender:
    cdef MappedBuffer seg
    cdef readonly int64_t seg_base
    cdef readonly int64_t wrote
    cdef dict _queues                   # (topic bytes, queue id) -> QueueState
    cdef readonly bytes store_host
    cdef readonly Py_ssize_t max_body
    # entry mode (DLedger): each record is the body of one DLedger entry (48-byte header before
    # it, a 32-byte index entry at entry_index x 32 in the index file attached as iseg)
    cdef readonly bint entries
    cdef MappedBuffer iseg
    cdef readonly int64_t iseg_base
    cdef readonly int64_t entry_index   # the next entry's index
    cdef readonly int64_t term          # the term the entries are written in
    cpdef QueueState queue(self, bytes topic, int32_t queue_id)
    cdef int append_c(self, QueueState q, const uint8_t *body, Py_ssize_t body_len, const uint8_t *props,
                      Py_ssize_t props_len, int32_t flag, int32_t sys_flag, int64_t born_ts,
                      const uint8_t *born_host, Py_ssize_t born_len, int32_t reconsume_times,
                      AppendOut *out) except -1
