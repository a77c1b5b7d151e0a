"""Start-up warnings about how exposed the broker is (said once, by `serve` / `web`)."""

from __future__ import annotations

import ipaddress

from core.auth_settings import AuthSettings


def exposure_warnings(auth: AuthSettings, bound_host: str) -> list[str]:
    """What an operator should hear before the broker serves on `bound_host`."""
    warnings = []
    if not auth.enabled and not _loopback(bound_host):
        warnings.append(
            f"authentication is off (JWT_ENABLED is not 'true') and the broker listens on "
            f"{bound_host}, beyond this machine: anyone who can reach the port can read, "
            "write and delete every queue")
    if not auth.enabled and (auth.secret or auth.public_key or auth.jwks_url):
        warnings.append("JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL is set but JWT_ENABLED "
                        "is not 'true': authentication is off")
    return warnings


def bind_notice(auth: AuthSettings, bound_host: str) -> str | None:
    """Said at start when the broker keeps itself to this machine, so an operator who
    expected it on the network learns why and what to change."""
    if auth.enabled or not _loopback(bound_host):
        return None
    return (f"authentication is off, so the broker listens on {bound_host} only (this "
            "machine); to serve other machines turn auth on (JWT_ENABLED=true) or say "
            "--host 0.0.0.0 (QUEEN_HOST)")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
