# The commit-log record and consume-queue entry layouts, shared by every kernel (record.h; the
# layout itself is documented in codec.pxd and docs/formats.md §1-§2).
from libc.stdint cimport uint32_t

cdef extern from "record.h" nogil:
    uint32_t RECORD_MESSAGE_MAGIC
    uint32_t RECORD_BLANK_MAGIC
    enum:
        RECORD_FIXED_LEN_V4
        RECORD_FIXED_LEN_NO_HOSTS
        RECORD_END_FILE_MIN_BLANK
        RECORD_SYSFLAG_BORNHOST_V6
        RECORD_SYSFLAG_STOREHOST_V6
        RECORD_SYSFLAG_TRANSACTION
        RECORD_MAX_TOPIC_LEN
        RECORD_MAX_PROPS_LEN
        RECORD_STORETIMESTAMP_POS_V4
        CQ_UNIT
    Py_ssize_t record_length_of(Py_ssize_t born_len, Py_ssize_t store_len, Py_ssize_t body_len,
                                Py_ssize_t topic_len, Py_ssize_t props_len)
