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
