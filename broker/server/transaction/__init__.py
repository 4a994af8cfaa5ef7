"""Transactional messages as RocketMQ 4.x keeps them (broker/transaction/queue of the Java broker).

A half message (TRAN_MSG=true) is stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic
and queue in REAL_TOPIC / REAL_QID (TransactionalMessageBridge); END_TRANSACTION commits it (the
real message is stored) or rolls it back, and either way an op message tagged "d" whose body is
the half message's queue offset goes to RMQ_SYS_TRANS_OP_HALF_TOPIC (EndTransactionProcessor,
TransactionalMessageService); TransactionalMessageCheckService asks a producer of the group about
half messages left undecided. Everything lives in the commit log and in the consumer offsets of
the system group CID_RMQ_SYS_TRANS, so a restart (kill -9 too) resumes where it was.
"""
from __future__ import annotations

from broker.common.topic_validator import CHECK_MAX_TIME_TOPIC, HALF_TOPIC, OP_TOPIC  # noqa: F401 (TopicValidator's)

SYS_GROUP = "CID_RMQ_SYS_TRANS"  # MixAll.CID_SYS_RMQ_TRANS: the check service's offsets
REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG

# MessageConst
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"

# MessageSysFlag: the transaction type is bits 2-3
TRANSACTION_NOT_TYPE, TRANSACTION_PREPARED_TYPE = 0, 0x4
TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE = 0x8, 0xC
TRANSACTION_TYPE_MASK = 0xC


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def reset_transaction_value(sys_flag: int, type_: int) -> int:
    """MessageSysFlag.resetTransactionValue."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | type_


def is_half(sys_flag: int, properties: dict) -> bool:
    """A send that is a half message: TRAN_MSG true (Boolean.parseBoolean, as RocketMQ's
    SendMessageProcessor decides), or the PREPARED type alone, which RocketMQ would store but
    never dispatch to a consume queue: kept as a half message here, so that it stays invisible."""
    return (properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
            or transaction_type(sys_flag) == TRANSACTION_PREPARED_TYPE)
