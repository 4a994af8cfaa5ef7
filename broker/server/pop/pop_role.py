"""Where pop is served: by the broker that takes writes (a master, the DLedger leader, the
controller's master), because every pop, ack and invisible-time change writes the revive log.

A slave or a DLedger follower refuses POP / ACK / BATCH_ACK / CHANGE_INVISIBLETIME with
SLAVE_NOT_AVAILABLE, the code RocketMQ answers requests that must write with on a slave
(EndTransactionProcessor, RecallMessageProcessor; its PopMessageProcessor has no check of its own
and would fail on the slave store's refused put). RocketMQ's proxy routes pop to the master
(brokerId 0), as ours does; the remark says where writes go now.

A request that wrote revive records is answered once they are durable (ReviveLog.durable_since):
a record the store kept (PUT_OK, or a flush / slave timeout: it is in this broker's log, as a
send so answered is) answers as if at once; a put the store refused (a DLedger leader deposed
before a majority held the entry) answers its status's code, and the client retries.
"""
from __future__ import annotations

import asyncio

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.remoting.refusals import Refusal
from broker.server.processor.send_processor import STATUS_CODES, STATUS_REMARKS, STORED_STATUSES, reply_when_put


class NotMaster(Refusal):
    response_code = codes.SLAVE_NOT_AVAILABLE


def not_master_remark(store, what: str) -> str:
    """Why this broker refuses `what`, naming its role (and, in DLedger mode, the leader it knows)."""
    why = store.not_master_remark() if hasattr(store, "not_master_remark") else "this broker is a slave"
    return (f"{what} is served by the master only (it writes the pop checkpoints and acks to the revive "
            f"log): {why}; RocketMQ's proxy routes pop to the master (brokerId 0)")


def not_kept(status, why) -> tuple[int, str] | None:
    """(code, remark) of a revive-log put the store did not keep, None when it did (STORED_STATUSES)."""
    if status in STORED_STATUSES:
        return None
    remark = STATUS_REMARKS.get(status) or status.name
    return (STATUS_CODES.get(status, codes.SYSTEM_ERROR),
            f"{remark}: the revive log did not keep this request's record{f' ({why})' if why else ''}; retry")


def reply_when_durable(cmd: RemotingCommand, response: RemotingCommand, put) -> RemotingCommand | asyncio.Future:
    """`response` once the put future `put` says its records are kept (at once when `put` is None)."""
    if put is None:
        return response

    def answer(status, why):
        refused = not_kept(status, why)
        return response if refused is None else cmd.response(refused[0], remark=refused[1])
    return reply_when_put(put, answer)
