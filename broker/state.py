"""What a web process holds for its lifetime: settings, the pool and the write path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import Request

from broker.auth.gate import Gate
from core.db import Database
from core.listener import WakeupHub
from core.push import Pusher
from core.settings import Settings


@dataclass(frozen=True, slots=True)
class BrokerState:
    settings: Settings
    db: Database
    pusher: Pusher
    hub: WakeupHub
    # Set when the process starts to shut down: long polls stop waiting and answer now.
    draining: asyncio.Event
    gate: Gate


def state_of(request: Request) -> BrokerState:
    state: BrokerState = request.app.state.broker
    return state
