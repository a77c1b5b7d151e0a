"""How requests name their tenant and how often limits are refreshed (docs/security/tenants.md).

With auth on, the tenant is a claim of the token (JWT_TENANT_CLAIM, core/auth_settings.py).
QUEEN_TENANT_HEADER names the header a trusted proxy (Queen's proxy sends `x-queen-tenant`)
or an admin token sets to name a tenant; QUEEN_TENANT_TRUSTED_PROXIES lists the addresses
whose header is believed for every caller. The edge applies these rules (broker/tenancy.py).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping

from core.env import EnvReader, SettingsError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HEADER_RE = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")  # an HTTP field name (RFC 9110)


@dataclasses.dataclass(frozen=True)
class TenancySettings:
    header: str = "x-queen-tenant"  # lower case, as the edge reads headers
    # Peers whose tenant header is believed (a trusted proxy): the tenant it names binds the
    # request, with auth on or off. Empty: no proxy is trusted.
    trusted_proxies: tuple[Network, ...] = ()
    # How often each process re-reads the quota table and the count of live broker
    # processes (each process enforces its share of a tenant's rates: core/tenancy/limiter.py).
    refresh_ms: int = 2000
    # How often a limited tenant's stored bytes are measured (by one process at a time).
    usage_interval_ms: int = 10_000
    # How long an answer 429 for a tenant's rate is held before it is sent. A client that
    # sends again as soon as it is answered (ignoring Retry-After) then costs the broker a
    # few refusals per second per connection instead of as many as it can send: a held
    # answer is a sleeping coroutine, an answered one a whole HTTP request.
    refusal_delay_ms: int = 250

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
    read = EnvReader(env)
    defaults = TenancySettings()
    header = read.text("QUEEN_TENANT_HEADER", defaults.header).strip().lower()
    if not _HEADER_RE.fullmatch(header):
        raise SettingsError(f"QUEEN_TENANT_HEADER={header!r} is not an HTTP header name")
    return TenancySettings(
        header=header,
        trusted_proxies=_networks(read.text("QUEEN_TENANT_TRUSTED_PROXIES", "")),
        refresh_ms=read.integer("QUEEN_TENANT_REFRESH_MS", defaults.refresh_ms, low=50,
                                high=600_000),
        usage_interval_ms=read.integer("QUEEN_TENANT_USAGE_INTERVAL_MS",
                                       defaults.usage_interval_ms, low=100, high=86_400_000),
        refusal_delay_ms=read.integer("QUEEN_TENANT_REFUSAL_DELAY_MS",
                                      defaults.refusal_delay_ms, low=0, high=10_000))


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
