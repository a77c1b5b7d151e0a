"""The refusals of the gate; `broker/errors.py` maps them to 401, 403 and 503."""

from __future__ import annotations

from core.errors import ClientError, ServiceError


class Unauthenticated(ClientError):
    """Authentication required"""


class Forbidden(ClientError):
    """Insufficient permissions"""


class KeysUnavailable(ServiceError):
    """The token's signing keys cannot be fetched from JWT_JWKS_URL right now; retry shortly."""
