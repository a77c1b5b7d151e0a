"""Tenants (docs/security/tenants.md): namespaces of names, and the quotas and rate limits
each may be given.

    names.py     what a tenant is called, and the default tenant ('')
    quotas.py    a tenant's limits as stored in queen.tenant_quotas
    buckets.py   token buckets (requests and messages per second)
    limiter.py   one process's enforcement of every tenant's limits
    catalog.py   the queue and partition caps, checked when a name is first used
    usage.py     what a tenant stores, measured for its storage quota
"""
