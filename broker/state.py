"""What a web process holds for its lifetime: its settings and the core broker service."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from broker.auth.gate import Gate
from core.service import Broker
from core.settings import Settings


@dataclass(frozen=True, slots=True)
class BrokerState:
    settings: Settings
    broker: Broker
    gate: Gate  # admits callers at each route's access level (JWT auth, §9)


def state_of(request: Request) -> BrokerState:
    state: BrokerState = request.app.state.broker
    return state


def broker_of(request: Request) -> Broker:
    """The core service the request's handler calls."""
    return state_of(request).broker
