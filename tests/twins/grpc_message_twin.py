"""Pure-Python twin of broker.kernels.h2_session.MessageReader: gRPC length-prefixed messages
(1 byte compressed flag, 4 byte big-endian length, the payload) out of a byte stream cut anywhere."""
from __future__ import annotations


class MessageTooLarge(ValueError):
    pass


class MessageReader:
    def __init__(self, max_length: int = 130 * 1024 * 1024):
        self.max_length = max_length
        self._pending = b""

    @property
    def buffered(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buf = self._pending + bytes(data)
        out = []
        pos = 0
        while len(buf) - pos >= 5:
            length = int.from_bytes(buf[pos + 1:pos + 5], "big")
            if length > self.max_length:
                self._pending = buf[pos:]
                raise MessageTooLarge(f"a message of {length} bytes is above the limit of {self.max_length}")
            if len(buf) - pos - 5 < length:
                break
            out.append((buf[pos], buf[pos + 5:pos + 5 + length]))
            pos += 5 + length
        self._pending = buf[pos:]
        return out
