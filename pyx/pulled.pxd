# Interface of the pulled-records kernel: a PULL_MESSAGE FOUND body (stored records back to back,
# RocketMQ 4.x's v1 layout, docs/formats.md §1) read once in C, into
#   - MessageExt views (decode_records): one small object per record holding its offsets into the
#     pulled bytes; body, properties, msgId, hosts are made on first access;
#   - Arrow column buffers (RecordColumns): every field of every record laid out as Arrow's
#     binary/string/map/primitive buffers, for broker.spark.arrow to wrap without a Python object
#     per row.
#
# The walk (walk_record) checks each record inside [pos, end) before anything is read from it:
#   8 bytes at least; MAGICCODE 0xDAA320A7; TOTALSIZE >= 91 and within what is left; the hosts
#   (8 or 20 bytes by SYSFLAG 0x10 / 0x20) and BODYLEN within TOTALSIZE; BODYLEN >= 0 leaving room
#   for TOPICLEN and PROPERTIESLEN; TOPICLEN >= 0 leaving room for PROPERTIESLEN; PROPERTIESLEN >= 0
#   ending exactly at TOTALSIZE. Anything else is a PulledRecordsError(offset, reason) (ValueError).

from libc.stdint cimport int32_t, int64_t, uint8_t

from broker.kernels.wbuf cimport WriteBuffer

# Where one record's parts are, relative to the buffer walked.
cdef struct RecordSpan:
    Py_ssize_t pos            # TOTALSIZE
    Py_ssize_t size
    Py_ssize_t born_host      # born host bytes (born_host_len: 8 or 20)
    Py_ssize_t store_host     # store host bytes (store_host_len)
    Py_ssize_t body
    Py_ssize_t topic
    Py_ssize_t props
    int32_t born_host_len
    int32_t store_host_len
    int32_t body_len
    int32_t topic_len
    int32_t props_len
    int32_t queue_id
    int32_t flag
    int32_t sys_flag
    int32_t reconsume_times
    int64_t queue_offset
    int64_t phys_offset
    int64_t born_ts
    int64_t store_ts


cdef int walk_record(const uint8_t *p, Py_ssize_t pos, Py_ssize_t end, RecordSpan *r) except -1


cdef class MessageExt:
    cdef object _data                 # the pulled bytes the offsets point into (None: built from fields)
    cdef RecordSpan _r
    cdef object _topic                # str
    cdef object _body                 # memoryview of the pulled bytes, or bytes (inflated, or given)
    cdef object _props                # dict once parsed (or given)
    cdef object _msg_id               # str once made (or given)
    cdef object _born_host, _store_host
    cdef public object broker_name
    cdef const uint8_t *_ptr(self)
    cdef object _text(self, const char *name, Py_ssize_t n)
    cdef object _host(self, Py_ssize_t at, Py_ssize_t n)


cdef class RecordColumns:
    cdef readonly Py_ssize_t rows
    cdef readonly list topics             # topic bytes, index = topic_idx
    cdef readonly bint utf8               # every key, value, TAGS and KEYS is valid UTF-8
    cdef readonly list compressed         # row indexes whose body the producer compressed (inflated here)
    cdef WriteBuffer topic_idx, queue_id, queue_offset, born_ts, store_ts
    cdef WriteBuffer msg_id_offsets, msg_id_data
    cdef WriteBuffer body_offsets, body_data
    cdef WriteBuffer map_offsets, key_offsets, key_data, value_offsets, value_data
    cdef WriteBuffer tags_offsets, tags_data, tags_valid, keys_offsets, keys_data, keys_valid
    cdef dict _topic_ids
    cdef bytes _last_topic
    cdef int32_t _last_idx
    cdef int _add(self, const uint8_t *p, RecordSpan *r) except -1
