# Interface of the RocketMQ remoting frame codec (4.x, NettyDecoder / RemotingCommand).
#
#   int32  L          length of what follows = 4 + H + B            (big-endian)
#   int32  T<<24 | H  serialize type (0 JSON, 1 ROCKETMQ) and header length H
#   H      header     JSON (UTF-8) or ROCKETMQ binary
#   B      body       L - 4 - H bytes, possibly none
#
# Frames longer than max_frame (16 MiB by default, as Java's) are refused.

from libc.stdint cimport int64_t, uint8_t

cdef enum:
    FRAME_PREFIX = 8
    SERIALIZE_JSON = 0
    SERIALIZE_ROCKETMQ = 1
