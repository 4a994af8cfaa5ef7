"""The connector's options, read once on the driver into small frozen dataclasses: they travel
to every task inside the pickled reader or writer, so they hold strings and numbers only.

Spark hands options over case-insensitively; names are matched here in lower case, and every
error names the option as documented (docs/spark.md)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.spark.errors import RocketMQOptionError

SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}
DEFAULT_READ_GROUP = "spark-rocketmq-reader"
DEFAULT_WRITE_GROUP = "spark-rocketmq-writer"

READ_OPTIONS = ("namesrvAddr", "topic", "tags", "startingOffsets", "endingOffsets", "startingTimestamp",
                "maxRecordsPerPartition", "maxRowsPerTrigger", "consumerGroup", "commitOffsets", "failOnDataLoss",
                "pullBatchSize", "pullsInFlight", "rowsPerBatch", "pullTimeoutMs")
WRITE_OPTIONS = ("namesrvAddr", "topic", "producerGroup", "batchSize", "batchBytes", "sendsInFlight",
                 "sendTimeoutMs")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items() if v is not None}


def _required(opts: dict, name: str) -> str:
    value = opts.get(name.lower(), "").strip()
    if not value:
        raise RocketMQOptionError(name, "is required")
    return value


def _int(opts: dict, name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise RocketMQOptionError(name, f"{raw!r} is not an integer") from None
    if value < minimum:
        raise RocketMQOptionError(name, f"{value} is below the minimum {minimum}")
    return value


def _bool(opts: dict, name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v not in ("true", "false"):
        raise RocketMQOptionError(name, f"{raw!r} is not true or false")
    return v == "true"


def _unknown(opts: dict, known: tuple[str, ...], what: str) -> None:
    # Spark passes its own options through (path from load()/save(), a stream's checkpoint
    # location, its name); anything else unknown is a typo that would otherwise be ignored
    # silently (startingOffset without the s, say)
    allowed = {k.lower() for k in known} | SPARK_OPTIONS
    extra = sorted(k for k in opts if k not in allowed)
    if extra:
        raise RocketMQOptionError(extra[0], f"unknown {what} option (known: {', '.join(known)})")


@dataclass(frozen=True)
class ReadOptions:
    namesrv_addr: str
    topic: str
    tags: str  # a subscription expression: "*" or "TagA || TagB"
    starting_offsets: str | None  # "earliest", "latest" or JSON (offsets.py); None: the default
    ending_offsets: str | None
    starting_timestamp: int | None  # ms since the epoch
    max_records_per_partition: int
    max_rows_per_trigger: int | None
    consumer_group: str | None  # committed to after each streaming batch when commit_offsets
    commit_offsets: bool
    fail_on_data_loss: bool
    pull_batch_size: int  # maxMsgNums of one pull (the broker caps it at 1024 and 256 KiB)
    pulls_in_flight: int  # pulls of one task outstanding at once
    rows_per_batch: int  # rows of one Arrow RecordBatch (about)
    pull_timeout_ms: int

    @property
    def pull_group(self) -> str:
        return self.consumer_group or DEFAULT_READ_GROUP

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> ReadOptions:
        o = _lower(options)
        _unknown(o, READ_OPTIONS, "read")
        starting = o.get("startingoffsets")
        ts = _int(o, "startingTimestamp", None, minimum=0)
        if ts is not None and starting is not None:
            raise RocketMQOptionError("startingTimestamp", "give either startingOffsets or startingTimestamp, not both")
        ending = o.get("endingoffsets")
        if streaming and ending is not None:
            raise RocketMQOptionError("endingOffsets", "applies to batch queries only (a stream has no end)")
        if not streaming and o.get("maxrowspertrigger") is not None:
            raise RocketMQOptionError("maxRowsPerTrigger", "applies to streaming queries only")
        group = o.get("consumergroup", "").strip() or None
        commit = _bool(o, "commitOffsets", group is not None)
        if commit and group is None:
            raise RocketMQOptionError("commitOffsets", "needs the consumerGroup option: whose offsets to commit")
        if commit and not streaming:
            raise RocketMQOptionError("commitOffsets", "applies to streaming queries only")
        return cls(
            namesrv_addr=_required(o, "namesrvAddr"), topic=_required(o, "topic"),
            tags=o.get("tags", "").strip() or "*",
            starting_offsets=starting, ending_offsets=ending, starting_timestamp=ts,
            max_records_per_partition=_int(o, "maxRecordsPerPartition", 100_000),
            max_rows_per_trigger=_int(o, "maxRowsPerTrigger", None),
            consumer_group=group, commit_offsets=commit,
            fail_on_data_loss=_bool(o, "failOnDataLoss", True),
            pull_batch_size=min(_int(o, "pullBatchSize", 1024), 1024),
            pulls_in_flight=_int(o, "pullsInFlight", 16),
            rows_per_batch=_int(o, "rowsPerBatch", 8192),
            pull_timeout_ms=_int(o, "pullTimeoutMs", 30_000),
        )


@dataclass(frozen=True)
class WriteOptions:
    namesrv_addr: str
    topic: str
    producer_group: str
    batch_size: int  # messages of one SEND_BATCH_MESSAGE
    batch_bytes: int  # and at most this many body bytes (the broker refuses a batch over 4 MiB)
    sends_in_flight: int  # batches of one task outstanding at once
    send_timeout_ms: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        o = _lower(options)
        _unknown(o, WRITE_OPTIONS, "write")
        return cls(
            namesrv_addr=_required(o, "namesrvAddr"), topic=_required(o, "topic"),
            producer_group=o.get("producergroup", "").strip() or DEFAULT_WRITE_GROUP,
            batch_size=_int(o, "batchSize", 256),
            batch_bytes=_int(o, "batchBytes", 1 << 20),
            sends_in_flight=_int(o, "sendsInFlight", 4),
            send_timeout_ms=_int(o, "sendTimeoutMs", 10_000),
        )
