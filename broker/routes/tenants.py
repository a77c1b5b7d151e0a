"""The tenants' admin routes (OPERATOR: an admin bound to no tenant): `GET /api/v1/tenants`,
`GET /api/v1/tenants/{tenant}`, `PUT` and `DELETE /api/v1/tenants/{tenant}/quota`
(docs/security/tenants.md). A path names the default tenant `_default`. A quota change
applies at once in the process that made it and in the others within
QUEEN_TENANT_REFRESH_MS."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from broker.state import broker_of
from broker.wire.http import json_response
from broker.wire.tenants import (
    QuotaBody,
    QuotaCleared,
    QuotaOut,
    TenantList,
    TenantOut,
    TenantPath,
)
from core.errors import BadRequest
from core.tenancy.names import tenant_from_path, tenant_in_path
from core.tenancy.quotas import quota_from_wire
from core.tenancy.service import TenantSummary


def _tenant(path: TenantPath) -> str:
    try:
        return tenant_from_path(path.tenant)
    except ValueError as exc:
        raise BadRequest(f"tenant {path.tenant[:64]!r} {exc}") from None


def _out(summary: TenantSummary) -> TenantOut:
    return TenantOut(summary.tenant, tenant_in_path(summary.tenant), summary.queues,
                     summary.partitions, summary.stored_bytes,
                     None if summary.quota is None else QuotaOut.of(summary.quota))


async def list_tenants(request: Request) -> Response:
    tenants = broker_of(request).tenants
    found = await tenants.summaries()
    return json_response(TenantList([_out(s) for s in found], tenants.limiter.processes))


async def get_tenant(request: Request, path: TenantPath) -> Response:
    return json_response(_out(await broker_of(request).tenants.summary(_tenant(path))))


async def put_quota(request: Request, path: TenantPath, body: QuotaBody) -> Response:
    tenant = _tenant(path)
    tenants = broker_of(request).tenants
    await tenants.set_quota(tenant, quota_from_wire(body.given()))
    return json_response(_out(await tenants.summary(tenant)))


async def delete_quota(request: Request, path: TenantPath) -> Response:
    tenant = _tenant(path)
    cleared = await broker_of(request).tenants.clear_quota(tenant)
    return json_response(QuotaCleared(tenant, cleared))
