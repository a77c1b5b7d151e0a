"""ASGI entry point for hypercorn: `broker.asgi:app_from_env()`."""

from __future__ import annotations

from starlette.applications import Starlette

from core.logs import configure_logging
from core.settings import Settings


def app_from_env() -> Starlette:
    from broker.app import create_app

    settings = Settings.from_env()
    configure_logging(settings.log_level)
    return create_app(settings)
