"""Stub of broker.kernels.send_request (pyx/send_request.pyx): SendMessage's request read from its
protobuf bytes into what the front's producer sends, for a plain, valid message; its answer for a
stored message."""
from collections.abc import Container

def read_send(payload: bytes, peer: str, max_body: int, max_user_props: int, max_user_prop_size: int,
              system_names: Container[str]) -> tuple[str, bytes, str | None, list[str] | None, dict[str, str], str] | None: ...
def read_send_props(payload: bytes, peer: str, max_body: int, max_user_props: int, max_user_prop_size: int,
                    system_names: Container[str]) -> tuple[str, bytes, bytes, str] | None: ...
def send_ok(message_id: str, offset: int, recall_handle: str) -> bytes: ...
