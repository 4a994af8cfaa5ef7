"""Stopping the broker's own background tasks."""
from __future__ import annotations

import asyncio


async def cancel_and_wait(tasks) -> None:
    """Cancel each task and wait until it has ended (its finally blocks have run); what one raised
    while ending is its own business, not the closer's."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except (asyncio.CancelledError, Exception):
            pass
