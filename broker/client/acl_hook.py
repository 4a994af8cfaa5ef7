"""AclClientRPCHook: a client's requests signed for a broker with aclEnable (RocketMQ's
acl.common.AclClientRPCHook with SessionCredentials).

Every request leaving a ClientChannel gets `AccessKey` and `Signature` =
base64(HMAC-SHA1(secretKey, the values of its extFields ordered by key, AccessKey among them, then
its body)), the content the broker's PlainAccessValidator checks. Requests are signed as the
channel flushes its WriteBuffer, frame by frame, so the kernel-rendered sends and pulls need no
signing path of their own; a client without credentials pays nothing. Responses (our answers to a
broker's requests) are not signed, as Java signs only in doBeforeRequest.
"""
from __future__ import annotations

from dataclasses import dataclass

from broker.kernels.remoting import FrameError
from broker.common.acl_signature import ACCESS_KEY, SIGNATURE, sign
from broker.remoting.codes import FLAG_RESPONSE
from broker.remoting.command import RemotingCommand


@dataclass(frozen=True)
class SessionCredentials:
    access_key: str
    secret_key: str

    def __post_init__(self):
        if not self.access_key or not self.secret_key:
            raise ValueError("SessionCredentials need an access key and a secret key")


class AclClientRPCHook:
    def __init__(self, credentials: SessionCredentials):
        self.credentials = credentials

    def sign(self, cmd: RemotingCommand) -> None:
        cmd.ext = dict(cmd.ext or {})
        cmd.ext[ACCESS_KEY] = self.credentials.access_key
        cmd.ext.pop(SIGNATURE, None)
        cmd.ext[SIGNATURE] = sign(cmd.ext, cmd.body, self.credentials.secret_key)

    def sign_frames(self, data: bytes) -> list:
        """The frames in `data` (a flush's worth, whole frames only), each request signed: the parts
        to write."""
        view = memoryview(data)
        out: list = []
        pos, n = 0, len(data)
        while pos < n:
            if n - pos < 8:
                raise FrameError(pos, "a torn frame in the client's own write buffer")
            total = int.from_bytes(view[pos:pos + 4], "big")
            mark = int.from_bytes(view[pos + 4:pos + 8], "big")
            st, header_len = mark >> 24, mark & 0xFFFFFF
            end = pos + 4 + total
            header = view[pos + 8:pos + 8 + header_len]
            cmd = RemotingCommand.decode(header, view[pos + 8 + header_len:end], st)
            if cmd.flag & FLAG_RESPONSE:
                out.append(view[pos:end])
            else:
                self.sign(cmd)
                out.extend(cmd.encode_parts())
            pos = end
        return out
