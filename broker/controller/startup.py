"""Running one controller with its request processor, for as long as a `async with` block lasts.

Two processes host a controller: `broker controller -c controller.conf` (RocketMQ's
ControllerStartup) and `broker namesrv -c namesrv.conf` with enableControllerInNamesrv=true
(NamesrvStartup starting its ControllerManager). Both go through here, so they start, announce and
stop a controller the same way.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.processor import ControllerRequestProcessor


@asynccontextmanager
async def running_controller(config: ControllerConfig) -> AsyncIterator[Controller]:
    """A started Controller answering on its controllerDLegerPeers address; stopped on the way out
    (its log written back and closed), also when starting it failed half way (the port taken)."""
    controller = Controller(config)  # opens and replays the log: a bad store refuses here
    ControllerRequestProcessor(controller)  # installs itself as the DLedger server's front
    try:
        await controller.start()
        yield controller
    finally:
        await controller.stop()


def listening_line(controller: Controller) -> str:
    """The line a process prints once its controller listens (tests and operators wait for it)."""
    config = controller.config
    return (f"controller {config.controllerDLegerSelfId} of {config.controllerDLegerGroup} listening on "
            f"{controller.addr}; log {config.controllerStorePath}")
