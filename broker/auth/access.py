"""Access levels (one per route, a column of `broker.table`) and the roles that pass them.

A higher role includes the lower ones (§9): `admin` passes every level; `read-write` passes
READ_ONLY, WRITE_ONLY and READ_WRITE; `read-only` passes READ_ONLY; `write-only` passes
WRITE_ONLY. PUBLIC passes any authenticated caller, with or without a role; a path in
JWT_SKIP_PATHS needs no token at all. OPERATOR is ADMIN for a request bound to no tenant
(broker/tenancy.py): the deployment's own routes (maintenance, tenants' quotas), which an
admin of one tenant may not use. In a deployment without tenants it is ADMIN.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Access(enum.Enum):
    PUBLIC = "public"
    READ_ONLY = "read-only"
    WRITE_ONLY = "write-only"
    READ_WRITE = "read-write"
    ADMIN = "admin"
    OPERATOR = "operator"


class Role(enum.Enum):
    ADMIN = "admin"
    READ_WRITE = "read-write"
    READ_ONLY = "read-only"
    WRITE_ONLY = "write-only"


# The roles that pass each level. A level missing here passes nobody (fails closed).
_PASSING: dict[Access, frozenset[Role]] = {
    Access.READ_ONLY: frozenset({Role.ADMIN, Role.READ_WRITE, Role.READ_ONLY}),
    Access.WRITE_ONLY: frozenset({Role.ADMIN, Role.READ_WRITE, Role.WRITE_ONLY}),
    Access.READ_WRITE: frozenset({Role.ADMIN, Role.READ_WRITE}),
    Access.ADMIN: frozenset({Role.ADMIN}),
    Access.OPERATOR: frozenset({Role.ADMIN}),  # and bound to no tenant: broker/endpoint.py
}


def grants(roles: Iterable[Role], level: object) -> bool:
    """Whether a caller holding `roles` may use a route of `level`."""
    if level is Access.PUBLIC:
        return True
    passing = _PASSING.get(level) if isinstance(level, Access) else None
    return passing is not None and not passing.isdisjoint(roles)
