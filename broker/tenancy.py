"""Which tenant a request acts in (docs/security/tenants.md), decided once per request.

1. A token with a tenant claim (JWT_TENANT_CLAIM) binds the request to that tenant; a
   tenant header naming another one is refused (403).
2. Else the tenant header (QUEEN_TENANT_HEADER, Queen's `x-queen-tenant`) names it when it
   comes from a trusted proxy (QUEEN_TENANT_TRUSTED_PROXIES), which binds the request to it;
   from an admin token without a tenant claim (an operator acting for a tenant), or from
   anyone while auth is off (no token ties a caller to anything then), which does not bind.
   From anyone else it is refused (403): a client never chooses its tenant.
3. Else the default tenant.

A request bound to a tenant may not use the operator's routes (Access.OPERATOR: the
maintenance switches, the tenants' quotas), whatever its roles. An unbound request that
named no tenant sees every tenant where a route can show them together (the metrics).
Every refusal is answered before the body is read, like the gate's.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.auth.access import Role
from broker.auth.errors import Forbidden
from broker.auth.gate import Identity
from core.errors import BadRequest
from core.tenancy.names import DEFAULT_TENANT, check_tenant, label
from core.tenancy.settings import TenancySettings


@dataclass(frozen=True, slots=True)
class Tenancy:
    tenant: str  # the tenant the request acts in
    bound: bool = False  # confined to it by its token's claim or a trusted proxy
    named: bool = False  # a claim or the header named it (not the default by absence)

    @property
    def operator(self) -> bool:
        """An operator's request: bound to no tenant (auth decides the rest)."""
        return not self.bound

    @property
    def every_tenant(self) -> bool:
        """An operator's request that named no tenant: views of every tenant at once."""
        return not self.bound and not self.named

    @property
    def scope(self) -> str | None:
        """Whose figures a view that can show every tenant at once shows: every tenant's
        (None) for an operator naming none, else the request's tenant's."""
        return None if self.every_tenant else self.tenant


DEFAULT = Tenancy(DEFAULT_TENANT)


def resolve(identity: Identity, header: str | None, peer: str | None, *,
            settings: TenancySettings, auth_on: bool) -> Tenancy:
    """The request's tenancy; BadRequest for a header that names no valid tenant, Forbidden
    for a header its sender may not use (see the module docstring)."""
    name = settings.header
    value = (header or "").strip()
    if identity.tenant is not None:
        if value and value != identity.tenant:
            raise Forbidden(f"the token is bound to tenant {label(identity.tenant)!r}: "
                            f"{name} may not name another one")
        return Tenancy(identity.tenant, bound=True, named=True)
    if not value:
        return DEFAULT
    try:
        tenant = check_tenant(value)
    except ValueError as exc:
        raise BadRequest(f"invalid {name} header: {exc}") from None
    if settings.trusts(peer):
        return Tenancy(tenant, bound=True, named=True)
    if not auth_on or Role.ADMIN in identity.roles:
        return Tenancy(tenant, named=True)
    raise Forbidden(f"the {name} header is taken from a trusted proxy or an admin token "
                    "only; a token names its tenant in its claims")
