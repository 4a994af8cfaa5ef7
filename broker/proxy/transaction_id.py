"""The transaction id the front hands a 5.x producer for a half message: where the half message
lies (broker address, commit-log offset, its queue offset in the half topic), which is all an
END_TRANSACTION needs. Self-describing, so any front (or this one after a restart) can end it."""
from __future__ import annotations

from dataclasses import dataclass

from broker.proxy.status import Code, ProxyError


@dataclass(frozen=True)
class TransactionId:
    broker_addr: str
    commit_log_offset: int
    tran_state_table_offset: int

    def __str__(self) -> str:
        return f"{self.broker_addr}/{self.commit_log_offset}/{self.tran_state_table_offset}"

    @classmethod
    def parse(cls, text: str) -> "TransactionId":
        addr, _, rest = text.partition("/")
        clo, _, tso = rest.partition("/")
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or not clo.isdigit() or not tso.isdigit():
            raise ProxyError(Code.INVALID_TRANSACTION_ID,
                             f"transaction id {text!r} is not one this front gave (<broker>/<offset>/<queue offset>)")
        return cls(addr, int(clo), int(tso))
