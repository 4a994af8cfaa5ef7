"""ReceiveMessage's answer for popped messages, encoded without protobuf objects: Status OK, each
message as ReceiveMessageResponse{message} (broker.kernels.receive_reply: the Message
broker.proxy.converter.to_proto builds, with the receipt handle, delivery attempt and invisible
duration the front sets), then the delivery timestamp, all as length-prefixed gRPC messages in one
piece: a Framed, or (receive_popped) the kernel's own bytes, which the endpoint takes as framed too
and holds without a copy until its DATA frames are written. Building a protobuf Message per
message in Python cost more than the rest of a receive; tests/test_receive_reply_kernel_vs_twin.py
holds the kernel equal to protobuf's encoding of what the converter builds."""
from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from broker.common import extra_info as _extra_info
from broker.kernels import receive_reply as _kernel
from broker.proxy.converter import SYSTEM_PROPERTIES
from broker.proxy.grpc_endpoint import Framed
from broker.proxy.protocol import service_pb2 as spb
from broker.proxy.status import status


def frame(message: bytes) -> bytes:
    """One gRPC message: flag 0 (not compressed), its length in 4 bytes big-endian, the bytes."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


_STATUS_OK = frame(spb.ReceiveMessageResponse(status=status()).SerializeToString())


def status_ok() -> Framed:
    return Framed(_STATUS_OK)


def one_message(m, topic: str, handle: str, invisible_ms: int) -> Framed:
    """One message's ReceiveMessageResponse, framed (ValueError: protobuf could not carry it)."""
    return Framed(frame(_kernel.encode_message(m, topic, handle, invisible_ms, SYSTEM_PROPERTIES)))


def receive_ok(messages: list, topic: str, handles: list[str], invisible_ms: int, now_ms: int) -> Framed:
    """The whole answer of a receive that popped `messages` (each shown with its handle in
    `handles`), delivered at `now_ms`. ValueError, before anything is answered, for a message
    protobuf could not carry either (a timestamp outside its range)."""
    now = Timestamp()
    now.FromMilliseconds(now_ms)
    return Framed(_STATUS_OK + _kernel.encode_messages(messages, topic, handles, invisible_ms, SYSTEM_PROPERTIES)
                  + frame(spb.ReceiveMessageResponse(delivery_timestamp=now).SerializeToString()))


def receive_popped(popped, topic: str, broker_name: str, invisible_ms: int, now_ms: int,
                   want_handles: bool) -> tuple[bytes, list[str] | None] | None:
    """The whole answer written from a POP_MESSAGE answer's records (broker.client.pop.PoppedRecords,
    FOUND), with no message object per record: what receive_ok answers for the messages
    broker.client.pop.read_records makes of them, and their receipt handles when `want_handles`.
    None when the kernel leaves them to that path (encode_popped: a compressed body, an IPv6 host,
    a message protobuf cannot carry, ...), or the offset infos do not parse: the caller then reads
    the records, which answers (or fails) as before."""
    try:
        starts = popped.starts()
    except ValueError:  # (ExtraInfoError too)
        return None
    return receive_popped_values(popped.body, starts, popped.pop_time, popped.invisible_time, popped.revive_qid,
                                 topic, broker_name, invisible_ms, now_ms, want_handles)


def receive_popped_values(body, starts: dict[str, int], pop_time: int, invisible_time: int, revive_qid: int,
                          topic: str, broker_name: str, invisible_ms: int, now_ms: int,
                          want_handles: bool) -> tuple[bytes, list[str] | None] | None:
    """receive_popped of the answer's values as they are: `body` the records back to back (any
    buffer: the local front's receive hands the one view of the log its pop read, no copy),
    `starts` as PoppedRecords.starts() gives them."""
    out = _kernel.encode_popped(body, topic, starts,
                                f"{pop_time}{_extra_info.SEP}{invisible_time}{_extra_info.SEP}{revive_qid}",
                                broker_name, invisible_ms, SYSTEM_PROPERTIES, now_ms, want_handles)
    return out  # (bytes, handles): the endpoint writes the kernel's bytes as framed messages, uncopied
