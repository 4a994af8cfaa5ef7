"""The local front's own broker reached by a call, not a connection: the consumer RPCs' pop and
batch ack (ConsumerActivity) hand their RemotingCommand to the broker's request handler
(BrokerController.handle: its role guard, pop's replay wait, refusals mapped to codes, latency
metrics) in the same event loop and read the answer it returns, as the in-process connection
(broker.remoting.memory_transport) would deliver it, without encoding and decoding both commands
and copying the popped records through the connection's buffers (a quarter of a receive's cost
at 32 messages).

What the two ends see is what the wire gives them: header values as the strings a command's
header carries (RemotingCommand.header_bytes' conversion), the records as one bytes body, a
handler's exception as SYSTEM_ERROR "internal error; see the broker log" (request_handling).
Only a broker without ACL is reached so: with aclEnable the front's requests are signed and
checked, which the connection does."""
from __future__ import annotations

import asyncio
import logging

from broker.client.errors import BrokerUnreachable
from broker.remoting.codes import SYSTEM_ERROR
from broker.remoting.command import RemotingCommand
from broker.remoting.headers import ext_string

log = logging.getLogger("proxy")


def _wire_ext(ext: dict | None) -> dict:
    return {k: v if type(v) is str else ext_string(v) for k, v in ext.items()} if ext else {}


class _Caller:
    """The `conn` a handler is given (its peer: ACL's address, logs), as an accepted connection's."""
    __slots__ = ("peer",)

    def __init__(self, peer: str):
        self.peer = peer


class LocalBroker:
    """`invoke(addr, cmd, timeout)` as MQClientInstance.invoke, for the broker at `addr` (this one)."""

    def __init__(self, addr: str, handler, peer: str):
        self.addr = addr
        self._handler = handler
        self._caller = _Caller(peer)

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        request = RemotingCommand(cmd.code, _wire_ext(cmd.ext), cmd.body, opaque=cmd.opaque, flag=cmd.flag)
        try:
            res = self._handler(request, self._caller)
            if res is not None and not isinstance(res, RemotingCommand):
                try:
                    res = await asyncio.wait_for(res, timeout)
                except asyncio.TimeoutError:
                    raise BrokerUnreachable(addr, f"no answer to request code {cmd.code} within {timeout:g} s") \
                        from None
        except (asyncio.CancelledError, BrokerUnreachable):
            raise
        except Exception:  # noqa: BLE001 - as the connection answers a handler's failure
            log.exception("handler failed for %r from %s", request, self._caller.peer)
            res = request.response(SYSTEM_ERROR, remark="internal error; see the broker log")
        if res is None:
            raise BrokerUnreachable(addr, f"no answer to request code {cmd.code}")
        body = res.body
        if isinstance(body, list):  # the records as views of the log: one body, as the client reads it
            body = b"".join(body)
        elif isinstance(body, memoryview):
            body = bytes(body)
        return RemotingCommand(res.code, _wire_ext(res.ext), body, res.remark, opaque=res.opaque, flag=res.flag)
