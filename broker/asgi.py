"""ASGI entry point for hypercorn: `broker.asgi:app_from_env()`."""

from __future__ import annotations

import logging

from starlette.applications import Starlette

from core.settings import Settings


def app_from_env() -> Starlette:
    from broker.app import create_app

    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    return create_app(settings)
