"""The pop consumption parts wired together: the revive service, the orderly-pop table and the
three processors (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), one object for the
BrokerController to start, register and close. Pop runs on a plain master (not a slave, and not yet
in DLedger or controller mode, whose role changes would have to move the revive service)."""
from __future__ import annotations

from broker.remoting.pop.ack_message_processor import AckMessageProcessor
from broker.remoting.pop.change_invisible_time_processor import ChangeInvisibleTimeProcessor
from broker.remoting.pop.consumer_order_info_manager import ConsumerOrderInfoManager
from broker.remoting.pop.pop_message_processor import PopMessageProcessor
from broker.remoting.pop.pop_revive_service import PopReviveService
from broker.remoting.pop.revive_log import ReviveLog


class PopService:
    def __init__(self, store, topics, holds, config, groups=None):
        self.log = ReviveLog(store, config.brokerClusterName, config.reviveQueueNum)
        self.order_info = ConsumerOrderInfoManager(store, self.log)
        self.revive = PopReviveService(store, topics, self.log, self.order_info, config.brokerName,
                                       config.maxReconsumeTimes, on_put=holds.notify, groups=groups)
        self.processors = (
            PopMessageProcessor(store, topics, holds, self.revive, self.order_info, config.longPollingEnable,
                                config.brokerSuspendMaxTimeMillis, groups=groups),
            AckMessageProcessor(store, topics, holds, self.revive, self.order_info),
            ChangeInvisibleTimeProcessor(store, topics, self.revive, self.order_info))

    async def start(self) -> None:
        await self.revive.start()

    def handlers(self) -> dict:
        out = {}
        for p in self.processors:
            out.update(p.handlers())
        return out

    async def close(self) -> None:
        await self.revive.close()
