# Interface of the client's wire kernel (RocketMQ 4.x remoting as a producer and consumer speak it;
# docs/formats.md §4 and §4.2).
#
# Requests. render_send / render_batch / render_pull write one whole request frame (prefix, JSON
# header, body) into a WriteBuffer with header.pxd's building blocks, byte for byte what
# RemotingCommand.request(code, ext, body).encode() writes for the same extFields (every value a
# JSON string, as Java's HashMap<String,String> holds them):
#   SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320): SendMessageRequestHeaderV2's letters
#       a producerGroup, b topic, c defaultTopic "TBW102", d defaultTopicQueueNums, e queueId,
#       f sysFlag, g bornTimestamp, h flag, i properties, j reconsumeTimes, k unitMode "false",
#       m batch, [l maxReconsumeTimes]
#   PULL_MESSAGE (11): consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag,
#       commitOffset, suspendTimeoutMillis, subscription, subVersion
# The properties are built here as Message.wire_properties() + UNIQ_KEY would (`k\x01v` joined by
# `\x02`), the UNIQ_KEY made by the same generator as broker.client.message.new_uniq_key.
#
# Replies. ReplyReader.read walks the frames of one socket read and turns each response it can
# read whole (docs/formats.md §4.2) into a Reply: a few numbers and strings, no dict, no
# RemotingCommand. A frame it cannot (a request from the broker, a header field of another shape)
# is handed back at its position, as SendPipeline.run hands frames to the processors.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from broker.kernels.wbuf cimport WriteBuffer

cdef enum:
    READ_DONE_ = 0          # every complete frame read; pos is the first incomplete one (or end)
    READ_SLOW_ = 1          # the frame at pos goes to Python (geometry in ReplyReader.slow_*)
    REPLY_MAX_EXT = 32      # a response with more ext fields is handed back

# Which known fields a Reply carries (Reply.fields)
cdef enum ReplyField:
    F_MSG_ID = 1
    F_QUEUE_ID = 2
    F_QUEUE_OFFSET = 4
    F_NEXT_BEGIN_OFFSET = 8
    F_MIN_OFFSET = 16
    F_MAX_OFFSET = 32
    F_SUGGEST_BROKER = 64
    F_TRANSACTION_ID = 128
    F_RECALL_HANDLE = 256


cdef class Reply:
    cdef readonly int32_t opaque
    cdef readonly int32_t code
    cdef readonly uint32_t fields         # ReplyField bits present
    cdef readonly object remark           # str or None
    cdef readonly object msg_id           # str or None
    cdef readonly object transaction_id   # str or None
    cdef readonly object recall_handle    # str or None: a timer message's (RocketMQ 5.3's recallHandle)
    cdef int32_t _queue_id
    cdef int64_t _queue_offset, _next_begin, _min_offset, _max_offset, _suggest
    cdef readonly bytes body              # b"" when the frame has none
    cdef readonly Py_ssize_t header_start, header_len   # in the buffer read, valid while it is handled
    cdef readonly int serialize_type


# The fast sends in flight on one connection (SendSlots, client_codec.pyx): a ring indexed by
# opaque, each slot holding what answering the send takes (the caller's future, the message, its
# queue and UNIQ_KEY, the producer that sent it, deadline and timeout).
cdef struct SendSlot:
    int32_t opaque
    int32_t queue_id
    void *fut        # owned references while the slot is taken (NULL: free)
    void *msg
    void *mq
    void *uniq
    void *owner
    double deadline
    double timeout


cdef class SendSlots:
    cdef SendSlot *ring
    cdef Py_ssize_t size
    cdef readonly Py_ssize_t in_flight
    cdef readonly double armed            # the deadline the channel's timer is armed at (inf: none)
    cdef int32_t _opaque
    cdef readonly object channel
    cdef object _create_future, _time     # the channel's loop's (bind())
    cdef bint _open
    cdef object status_of                 # {response code: SendResult status} of a stored message
    cdef object result_type               # SendResult
    cdef WriteBuffer props                # the properties of the send being rendered
    cdef int complete(self, Reply r) except -1
    cpdef int send(self, WriteBuffer w, fut, owner, str group, msg, mq, int32_t queue_id, int32_t default_queues,
                   Py_ssize_t compress_over, double now, double timeout) except -2


cdef class ReplyReader:
    cdef public SendSlots sends           # answers to these sends complete their futures here
    cdef readonly list replies            # Reply objects read since take()
    cdef readonly Py_ssize_t max_frame
    # the frame handed back (READ_SLOW)
    cdef readonly int slow_type
    cdef readonly Py_ssize_t slow_header_start, slow_header_len, slow_body_start, slow_body_len, slow_next
    cdef Reply _reply(self, const uint8_t *buf, int st, Py_ssize_t hs, Py_ssize_t hl, Py_ssize_t bs, Py_ssize_t bl)


# A UNIQ_KEY (MessageClientIDSetter): 20 hex digits of ip, pid and a random per process, 8 of the
# milliseconds since start, 4 of a counter; written into out (32 bytes).
cdef int uniq_key_into(uint8_t *out) except -1
