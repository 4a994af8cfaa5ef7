"""Stub of broker.kernels.ack_request (pyx/ack_request.pyx): AckMessage's request read from its
protobuf bytes for the local front's batch ack, with its all-acked answer."""

def read_ack(payload: bytes) -> tuple[str, str, list[tuple[int, int, int, int, str, str, int, list[int]]], bytes] | None: ...
