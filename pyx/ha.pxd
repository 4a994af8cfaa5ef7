# Interface of the HA stream codec (RocketMQ 4.x HAConnection / HAClient).
#
#   master -> slave   int64 phyOffset | int32 bodySize | bodySize bytes of the commit log
#                     (bodySize 0: a heartbeat, phyOffset = the master's next transfer offset)
#   slave -> master   int64 maxPhyOffset, repeated (the first is the request, later ones acks)
#
# All big-endian. A frame whose phyOffset does not continue the slave's log stops the parse.

from libc.stdint cimport int64_t

cdef enum:
    HA_HEADER = 12
    HA_REPORT = 8
