"""The pop consumption parts wired together: the revive service, the orderly-pop table and the
three processors (POP_MESSAGE, ACK_MESSAGE / BATCH_ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), one
object for the BrokerController to start, register, move with the role and close.

Pop is served wherever the broker takes writes: a plain master, the DLedger leader, the master
of controller mode. The handlers are registered in every role; a broker that is not the master
refuses them (pop_role: SLAVE_NOT_AVAILABLE, naming its role). The role moves the service as it
moves the transaction check service (`set_serving`, called by the BrokerController at each
switch): a new master first replays the revive log it replicated (requests meanwhile wait for
the replay, as END_TRANSACTION waits for the transaction state), then serves and revives; a
broker that stops being the master forgets its in-memory pop state at once.
"""
from __future__ import annotations

import asyncio
import logging

from broker.remoting import codes
from broker.remoting.command import RemotingCommand
from broker.server.processor.ack_message_processor import AckMessageProcessor
from broker.server.processor.change_invisible_time_processor import ChangeInvisibleTimeProcessor
from broker.server.pop.consumer_order_info_manager import ConsumerOrderInfoManager
from broker.server.processor.pop_message_processor import PopMessageProcessor
from broker.server.pop.pop_revive_service import PopReviveService
from broker.server.pop.pop_role import not_master_remark
from broker.server.pop.revive_log import ReviveLog
from broker.remoting.refusals import BadRequest, response_code
from broker.server.tasks import cancel_and_wait
from broker.store.errors import ServiceUnavailable, StoreError

log = logging.getLogger("pop")

READY_WAIT_S = 5.0  # a request arriving while a new master replays waits this long, then SYSTEM_BUSY
REPLAY_RETRY_S = 1.0  # a replay the store refused (it is closing, its disk is full) is tried again

_NAMES = {codes.POP_MESSAGE: "POP_MESSAGE", codes.ACK_MESSAGE: "ACK_MESSAGE",
          codes.BATCH_ACK_MESSAGE: "BATCH_ACK_MESSAGE", codes.CHANGE_MESSAGE_INVISIBLETIME: "CHANGE_MESSAGE_INVISIBLETIME"}


class PopService:
    def __init__(self, store, topics, holds, config, groups=None):
        self.store = store
        self.holds = holds
        self.log = ReviveLog(store, config.brokerClusterName, config.reviveQueueNum)
        self.order_info = ConsumerOrderInfoManager(store, self.log)
        self.revive = PopReviveService(store, topics, self.log, self.order_info, config.brokerName,
                                       config.maxReconsumeTimes, on_put=holds.notify, groups=groups)
        self.processors = (
            PopMessageProcessor(store, topics, holds, self.revive, self.order_info, config.longPollingEnable,
                                config.brokerSuspendMaxTimeMillis, groups=groups,
                                property_filter=config.enablePropertyFilter),
            AckMessageProcessor(store, topics, holds, self.revive, self.order_info),
            ChangeInvisibleTimeProcessor(store, topics, self.revive, self.order_info))
        self.ready = asyncio.Event()  # set while serving as master, once the revive log is replayed
        self._serving = False
        self._take_over: asyncio.Task | None = None

    async def start(self) -> None:
        """A plain master at start: the revive log is replayed before the broker listens."""
        self._serving = True
        await self.revive.start()
        self.ready.set()

    def set_serving(self, on: bool) -> None:
        """Follow the broker's role: a master replays the revive log, then serves and revives; any
        other role stops reviving and forgets the in-memory state (the next master replays)."""
        if on and not self._serving:
            self._serving = True
            self._take_over = asyncio.ensure_future(self._replay())
        elif not on and self._serving:
            self._serving = False
            self.ready.clear()
            if self._take_over is not None:
                self._take_over.cancel()
                self._take_over = None
            self.revive.stop()
            self.holds.notify_all()  # a held pop looks again now and is refused, not at its deadline
            log.info("pop: not the master any more; revive stopped, pop state left to the revive log")

    async def _replay(self) -> None:
        while True:
            try:
                await self.revive.start()
                break
            except (StoreError, ServiceUnavailable) as e:
                log.error("pop: the revive log was not replayed (%s); pop waits, again in %gs", e, REPLAY_RETRY_S)
                await asyncio.sleep(REPLAY_RETRY_S)
        self._take_over = None
        self.ready.set()
        log.info("pop: serving as master, %d checkpoints in flight", len(self.revive.inflight))

    def handlers(self) -> dict:
        out = {}
        for p in self.processors:
            out.update({code: self._guarded(code, fn) for code, fn in p.handlers().items()})
        return out

    def _refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        if not self._serving or self.store.is_slave:
            return cmd.response(codes.SLAVE_NOT_AVAILABLE,
                                remark=not_master_remark(self.store, _NAMES.get(cmd.code, f"request {cmd.code}")))
        return None

    def _guarded(self, code: int, fn):
        def handle(cmd: RemotingCommand, conn):
            refused = self._refusal(cmd)
            if refused is not None:
                return refused
            if not self.ready.is_set():
                return self._later(fn, cmd, conn)
            return fn(cmd, conn)
        return handle

    async def _later(self, fn, cmd: RemotingCommand, conn):
        """A request to a new master still replaying the revive log: served once the replay is done."""
        try:
            await asyncio.wait_for(self.ready.wait(), READY_WAIT_S)
        except asyncio.TimeoutError:
            return self._refusal(cmd) or cmd.response(
                codes.SYSTEM_BUSY, remark="the new master is still replaying the revive log (pop state); retry")
        refused = self._refusal(cmd)
        if refused is not None:
            return refused
        try:
            res = fn(cmd, conn)
            return res if res is None or isinstance(res, RemotingCommand) else await res
        except Exception as e:  # as BrokerController.handle answers a refusal raised at once
            code = response_code(e)
            if code is None:
                raise
            return cmd.response(code, remark=f"bad request (code {cmd.code}): {e}" if isinstance(e, BadRequest)
                                else str(e))

    async def close(self) -> None:
        if self._take_over is not None:
            await cancel_and_wait([self._take_over])
            self._take_over = None
        await self.revive.close()
