"""How requests name their tenant and how often limits are refreshed (docs/security/tenants.md).

With auth on, the tenant is a claim of the token (JWT_TENANT_CLAIM, core/auth_settings.py).
QUEEN_TENANT_HEADER names the header a trusted proxy (Queen's proxy sends `x-queen-tenant`)
or an admin token sets to name a tenant; QUEEN_TENANT_TRUSTED_PROXIES lists the addresses
whose header is believed for every caller. The edge applies these rules (broker/tenancy.py).

Each setting is declared once, on its field (core/env.py `Heading.setting`); the trusted
proxies, a list of networks, are read by `_networks` and described in core/variables.py.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping

from core.env import EnvReader, SettingsError, read_fields
from core.variables import TENANTS

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HEADER_RE = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")  # an HTTP field name (RFC 9110)


def _header_name(name: str, value: str) -> str:
    """The header in lower case, as the edge reads headers; refused unless a field name."""
    header = value.strip().lower()
    if not _HEADER_RE.fullmatch(header):
        raise SettingsError(f"{name}={header!r} is not an HTTP header name")
    return header


@dataclasses.dataclass(frozen=True)
class TenancySettings:
    header: str = TENANTS.setting(
        "x-queen-tenant", "QUEEN_TENANT_HEADER",
        "Header naming a tenant: believed from a trusted proxy (any caller of it), from an "
        "admin token without a tenant claim (acting for that tenant), and from anyone with "
        "auth off.", check=_header_name)
    # Peers whose tenant header is believed (a trusted proxy): the tenant it names binds the
    # request, with auth on or off. Empty: no proxy is trusted.
    trusted_proxies: tuple[Network, ...] = ()
    # Each process enforces its share of a tenant's rates (core/tenancy/limiter.py), so it
    # re-reads the quotas and the count of live processes this often.
    refresh_ms: int = TENANTS.setting(
        2000, "QUEEN_TENANT_REFRESH_MS",
        "How often, in milliseconds, each process re-reads the tenants' quotas and the "
        "number of live broker processes (each enforces its share of a tenant's rates).",
        low=50, high=600_000)
    usage_interval_ms: int = TENANTS.setting(
        10_000, "QUEEN_TENANT_USAGE_INTERVAL_MS",
        "How often, in milliseconds, the bytes a tenant with a storage quota stores are "
        "measured (by one process of the deployment).", low=100, high=86_400_000)
    # A client that sends again as soon as it is answered (ignoring Retry-After) then costs
    # the broker a few refusals per second per connection instead of as many as it can
    # send: a held answer is a sleeping coroutine, an answered one a whole HTTP request.
    refusal_delay_ms: int = TENANTS.setting(
        250, "QUEEN_TENANT_REFUSAL_DELAY_MS",
        "How long, in milliseconds, an answer 429 to a tenant over a rate is held before it "
        "is sent, so a client that ignores Retry-After cannot make the broker refuse "
        "requests as fast as it sends them (`0`: answer at once).", low=0, high=10_000)

    def trusts(self, peer: str | None) -> bool:
        """Whether `peer` (an IP address) is a trusted proxy."""
        if peer is None or not self.trusted_proxies:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.trusted_proxies)


def tenancy_settings_from_env(env: Mapping[str, str]) -> TenancySettings:
    return TenancySettings(**read_fields(TenancySettings, env, {
        "trusted_proxies": lambda: _networks(
            EnvReader(env).text("QUEEN_TENANT_TRUSTED_PROXIES", ""))}))


def _networks(value: str) -> tuple[Network, ...]:
    out = []
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise SettingsError(f"QUEEN_TENANT_TRUSTED_PROXIES: {item!r} is not an address "
                                "or a network such as 10.0.0.0/8") from None
    return tuple(out)
