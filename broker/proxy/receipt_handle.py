"""ReceiptHandle (the Java proxy's common.consumer.ReceiptHandle): what a 5.x consumer holds for a
message it received. It is the broker's extraInfo (the POP_CK handle, 8 fields) with the message's
commit log offset appended as a 9th field, as the Java proxy encodes it. The broker reads the first
8 fields and ignores the 9th (broker.common.extra_info.parse), so the same string acks and
changes the invisible time; the front needs the offset to send the message to %DLQ%<group>
(CONSUMER_SEND_MSG_BACK names a message by its commit log offset)."""
from __future__ import annotations

from broker.proxy.status import Code, ProxyError
from broker.common import extra_info as _extra_info

SEP = _extra_info.SEP


def encode(extra_info: str, commit_log_offset: int) -> str:
    return f"{extra_info}{_extra_info.SEP}{commit_log_offset}"


def decode(text: str) -> _extra_info.ExtraInfo:
    """The handle's extraInfo fields; INVALID_RECEIPT_HANDLE when they do not parse."""
    try:
        return _extra_info.parse(text)
    except ValueError as e:
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text[:200]!r}: {e}") from None


def commit_log_offset(text: str) -> int:
    """The 9th field; INVALID_RECEIPT_HANDLE when it is missing or not an offset (the Java proxy's
    "commit log offset is empty")."""
    parts = text.split(_extra_info.SEP)
    if len(parts) != 9 or not parts[8].isdigit() or int(parts[8]) >= 1 << 63:
        raise ProxyError(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {text[:200]!r}: commit log offset is empty "
                                                      f"or not an offset (a handle this front gave has 9 fields)")
    return int(parts[8])


_I64 = (1 << 63) - 1


class BatchReader:
    """The handles of one AckMessage read for a batch ack: `read(text)` is (decode's fields, the
    handle's queue offset), with the seven fields the handles of one popped queue share
    (checkpoint offset, pop time, invisible time, revive queue, retry flag, broker, queue id)
    parsed once per batch, not once per handle, and only the queue offset read per handle: the
    ExtraInfo given is decode's for the first handle of those seven fields (its queue_offset is
    that handle's; the offset beside it is this one's). A handle that is not the common 9-field
    shape, or whose queue offset does not parse, is read by `decode` (its error included), so
    the answer is decode's for every handle (tests/test_receipt_handle_batch.py holds them equal)."""

    __slots__ = ("_heads",)

    def __init__(self):
        self._heads: dict[str, _extra_info.ExtraInfo] = {}  # the first 7 fields' text -> their values

    def read(self, text: str) -> tuple[_extra_info.ExtraInfo, int | None]:
        parts = text.rsplit(SEP, 2)
        if len(parts) == 3:
            head = self._heads.get(parts[0])
            if head is not None:
                try:
                    qo = int(parts[1])
                except ValueError:
                    qo = -1
                if 0 <= qo <= _I64:
                    return head, qo
        info = decode(text)
        if len(parts) == 3 and parts[0].count(SEP) == 6:  # exactly 9 fields: the head is the 7 decoded
            self._heads[parts[0]] = info
        return info, info.queue_offset
