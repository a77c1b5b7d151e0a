"""What a tenant is called.

A tenant is a namespace of queues, consumer groups, KV namespaces, timers, locks, stream
queries and ephemeral queues. The default tenant is the empty string: what every request
that names no tenant acts in, and the only tenant of a deployment that never names one (its
rows carry '' and nothing else changes).

A tenant's name is 1 to 128 characters: letters, digits and `. _ : @ -`, starting with a
letter or a digit (a UUID, as Queen's proxy sends, is one). No control character can be in
it, which the keys of ephemeral queues rely on (core/tenancy/scoped.py); no `/`, so it can be a
path segment; and none starts with `_`, so `_default` can name the default tenant in a path
(the admin routes, broker/routes/tenants.py).
"""

from __future__ import annotations

import re

DEFAULT_TENANT = ""
DEFAULT_IN_PATH = "_default"  # the default tenant where a path segment must name one
MAX_TENANT_CHARS = 128
_TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


def check_tenant(value: str) -> str:
    """A tenant's name as given, or ValueError saying why it is not one ('' is the default
    tenant and always valid)."""
    if value == DEFAULT_TENANT or _TENANT_RE.fullmatch(value):
        return value
    if len(value) > MAX_TENANT_CHARS:
        raise ValueError(f"is longer than {MAX_TENANT_CHARS} characters")
    raise ValueError("must be letters, digits and . _ : @ - (starting with a letter or a "
                     "digit)")


def tenant_from_path(segment: str) -> str:
    """The tenant a path segment names (`_default`: the default tenant)."""
    return DEFAULT_TENANT if segment == DEFAULT_IN_PATH else check_tenant(segment)


def tenant_in_path(tenant: str) -> str:
    return DEFAULT_IN_PATH if tenant == DEFAULT_TENANT else tenant


def label(tenant: str) -> str:
    """How logs and the CLI show a tenant."""
    return tenant or "(default)"
