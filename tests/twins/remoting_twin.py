"""Pure-Python twin of broker.kernels.remoting (tests only), written from docs/formats.md §4."""
from __future__ import annotations

import struct

DEFAULT_MAX_FRAME = 16 * 1024 * 1024


class FrameError(ValueError):
    def __init__(self, offset, reason):
        super().__init__(f"bad remoting frame at offset {offset}: {reason}")
        self.offset = offset


def split_frames(buf, start, end, max_frame=DEFAULT_MAX_FRAME):
    mv = memoryview(buf)
    if not 0 <= start <= end <= len(mv):
        raise ValueError("bad range")
    frames, pos = [], start
    while end - pos >= 4:
        (length,) = struct.unpack_from(">i", mv, pos)
        if length < 4 or length > max_frame:
            raise FrameError(pos, "length")
        if end - pos - 4 < length:
            break
        (word,) = struct.unpack_from(">I", mv, pos + 4)
        htype, hlen = word >> 24, word & 0xFFFFFF
        if hlen > length - 4:
            raise FrameError(pos, "header length")
        if htype > 1:
            raise FrameError(pos, "serialize type")
        frames.append((htype, pos + 8, hlen, pos + 8 + hlen, length - 4 - hlen))
        pos += 4 + length
    return frames, pos


def reallocate(buf, start, end):
    mv = memoryview(buf)
    mv[0:end - start] = bytes(mv[start:end])
    return end - start


def frame_prefix(header_len, body_len, serialize_type=0):
    return struct.pack(">iI", 4 + header_len + body_len, (serialize_type << 24) | header_len)
