"""A name and its tenant in one string, for keys that hold one string.

The default tenant's names are themselves; another tenant's name is the tenant, U+001F (the
ASCII unit separator) and the name. Neither a tenant (core/tenancy/names.py) nor any name the
broker takes can contain a control character, so the key is unambiguous and splits back.

Used where a store or a map is keyed by a bare name and the tenant must be part of the key:
the ephemeral queues' tables (core/ephemeral), the autopilot's lanes (core/engine/autopilot.py)
and the Kafka group coordinator's groups (broker/kafka/coordinator.py). Tables that name
things have a tenant column instead (migration 140).
"""

from __future__ import annotations

SEPARATOR = "\x1f"


def scoped(tenant: str, name: str) -> str:
    return name if not tenant else f"{tenant}{SEPARATOR}{name}"


def unscoped(key: str) -> tuple[str, str]:
    """(tenant, name) of a key `scoped` made."""
    tenant, sep, name = key.partition(SEPARATOR)
    return (tenant, name) if sep else ("", key)


def belongs(key: str, tenant: str) -> bool:
    """Whether a scoped key is one of `tenant`'s."""
    if not tenant:
        return SEPARATOR not in key
    return key.startswith(tenant + SEPARATOR)
