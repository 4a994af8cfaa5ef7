"""The controller's events (RocketMQ's controller/impl/event): each one the body of one Raft entry.

An event records a decision already taken by the leader (the broker id handed out, the master
elected), never a request to decide again: applying the same events in the same order gives the
same state on every controller and at every replay, whatever the clocks and heartbeats.

The body is JSON with a `type` tag and a format version `v`. A controller refuses to start on an
entry of a version it does not know (a newer controller wrote the log): skipping it would fork
its state from the group's.
"""
from __future__ import annotations

import msgspec

from broker.store.errors import StoreError

EVENT_VERSION = 1


class EventFormatError(StoreError):
    """A Raft entry that is not an event this controller can apply: the controller refuses to start."""

    def __init__(self, index: int, why: str):
        super().__init__(f"controller log entry {index}: {why}")
        self.index = index


class Event(msgspec.Struct, tag_field="type", kw_only=True):
    v: int = EVENT_VERSION


class ApplyBrokerIdEvent(Event, tag="ApplyBrokerId"):
    clusterName: str
    brokerName: str
    brokerAddress: str
    brokerId: int


class ElectMasterEvent(Event, tag="ElectMaster"):
    brokerName: str
    # None: the master is gone and nobody could be elected (RocketMQ's ElectMasterEvent(false)):
    # the group is left without a master, its SyncStateSet as it was
    newMasterBrokerId: int | None


class AlterSyncStateSetEvent(Event, tag="AlterSyncStateSet"):
    brokerName: str
    syncStateSet: list[int]


class CleanBrokerDataEvent(Event, tag="CleanBrokerData"):
    brokerName: str
    brokerIds: list[int] | None = None  # None: the whole group


class NoopEvent(Event, tag="Noop"):
    """A new Raft leader's first entry: Raft commits the entries of earlier terms only with one of
    the current term, and the leader must have applied all of them before it validates anything."""
    leaderId: str = ""


AnyEvent = ApplyBrokerIdEvent | ElectMasterEvent | AlterSyncStateSetEvent | CleanBrokerDataEvent | NoopEvent

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def decode_event(body, index: int = -1) -> AnyEvent:
    try:
        event = _decoder.decode(body)
    except msgspec.DecodeError as e:
        raise EventFormatError(index, f"not a controller event: {e}") from None
    if event.v != EVENT_VERSION:
        raise EventFormatError(index, f"event format version {event.v}; this controller reads {EVENT_VERSION}")
    return event
