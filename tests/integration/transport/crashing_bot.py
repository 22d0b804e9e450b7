"""A bot process for the kill -9 test: polls the fake Bot API once into sqlite stores.

``python -m tests.integration.transport.crashing_bot API_BASE DIR OWNER MODE`` with the token
on stdin. MODE ``die`` SIGKILLs the process inside the first handoff, before anything is
stored; MODE ``poll`` polls twice (the second poll confirms the first's updates) and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from shelldon.contracts import Decision, InboundMessage
from shelldon.transport.approvals import callback_key
from shelldon.transport.poller import Poller
from shelldon.transport.telegram import BotApi
from shelldon.transport.updates import UpdateRules
from tests.integration.transport.support import EventStore, SqliteLedger


async def main(api_base: str, directory: Path, owner: int, mode: str, token: str) -> None:
    ledger = SqliteLedger(directory / "ledger.db")
    store = EventStore(directory / "events.db")

    async def handoff(event: InboundMessage | Decision) -> str | None:
        if mode == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        return await store.handoff(event)

    async with BotApi(token, api_base=api_base) as api:
        poller = Poller(
            api, UpdateRules.of([owner], callback_key(token)), ledger, handoff, poll_timeout_s=0
        )
        await poller.poll_once()
        await poller.poll_once()
    ledger.close()
    store.close()


if __name__ == "__main__":
    base, folder, owner_id, run_mode = sys.argv[1:5]
    asyncio.run(main(base, Path(folder), int(owner_id), run_mode, sys.stdin.read().strip()))
