"""Running a handler for a request the peer sent and sending its answer, for both ends of a
remoting connection: the broker's RemotingConnection (requests from clients) and the client's
ClientChannel (requests a broker sends, e.g. NOTIFY_CONSUMER_IDS_CHANGED).

A handler returns a response, None (no answer), or an awaitable of either. An exception becomes
SYSTEM_ERROR naming the log that holds the traceback; a oneway request is never answered.
"""
from __future__ import annotations

import asyncio
import logging

from broker.remoting.codes import SYSTEM_ERROR
from broker.remoting.command import RemotingCommand


class RequestHandling:
    """Mixed into a protocol that has `handler`, `peer`, `tasks` (a set) and `send(cmd)`."""

    _log = logging.getLogger("remoting")
    _side = "broker"  # whose log the SYSTEM_ERROR remark points to

    def _handle_request(self, cmd: RemotingCommand) -> None:
        if self.handler is None:
            return
        try:
            res = self.handler(cmd, self)
        except Exception:
            self._log.exception("handler failed for %r from %s", cmd, self.peer)
            res = cmd.response(SYSTEM_ERROR, remark=f"internal error; see the {self._side} log")
        if res is None:
            return
        if isinstance(res, RemotingCommand):
            if not cmd.is_oneway:
                self.send(res)
            return
        if isinstance(res, asyncio.Future):  # e.g. a SYNC_FLUSH send: no task needed
            res.add_done_callback(lambda f, cmd=cmd: self._reply_later(f, cmd))
            return
        task = asyncio.ensure_future(res)
        self.tasks.add(task)
        task.add_done_callback(lambda t, cmd=cmd: self._reply_later(t, cmd))

    def _reply_later(self, task: asyncio.Future, cmd: RemotingCommand) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._log.error("handler failed for code %d from %s: %r", cmd.code, self.peer, exc, exc_info=exc)
            res = cmd.response(SYSTEM_ERROR, remark=f"internal error; see the {self._side} log")
        else:
            res = task.result()
        if res is not None and not cmd.is_oneway:
            self.send(res)
