"""`token`: mint a token the broker accepts, from the auth settings in the environment."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import click

from broker.auth.minting import ROLES, CannotMint, mint, ttl_seconds
from broker.ctl.api import USAGE, CtlError
from core.auth_settings import auth_settings_from_env
from core.env import SettingsError
from core.tenancy.names import label, tenant_from_path


def _tenant(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    try:
        return None if value is None else tenant_from_path(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} {exc}", ctx=ctx, param=param) from None


def _ttl(ctx: click.Context, param: click.Parameter, value: str) -> int:
    try:
        return ttl_seconds(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@click.command()
@click.option("--role", required=True, type=click.Choice(ROLES),
              help="the access level the token grants")
@click.option("--sub", required=True, help="who it is for (pushes record it as producerSub)")
@click.option("--ttl", "ttl_s", default="1h", show_default=True, callback=_ttl,
              metavar="DURATION", help="how long it is valid: 90s, 15m, 1h, 7d (at most 366d)")
@click.option("--tenant", callback=_tenant, default=None,
              help="bind the token to this tenant (its JWT_TENANT_CLAIM claim); `_default` "
                   "binds it to the default tenant")
@click.option("--json", "as_json", is_flag=True,
              help="print the token with its claims and algorithm as JSON")
def token(role: str, sub: str, ttl_s: int, tenant: str | None, as_json: bool) -> None:
    """Mint a token for a broker that verifies HS256/384/512 tokens with JWT_SECRET.

    Reads the broker's auth settings from the environment (JWT_SECRET, JWT_ALGORITHM,
    JWT_ISSUER, JWT_AUDIENCE, JWT_ROLES_CLAIM, JWT_ROLE_*), so the token carries what
    that broker reads. Prints the token alone (export QUEEN_TOKEN="$(queen-broker token
    ...)"). A broker that verifies RS*/EdDSA tokens holds no private key: its tokens come
    from the identity provider that issues them."""
    try:
        auth = auth_settings_from_env(os.environ)
        minted = mint(auth, role=role, sub=sub, ttl_s=ttl_s, tenant=tenant)
    except (SettingsError, CannotMint) as exc:
        raise CtlError(f"cannot mint a token: {exc}", USAGE) from None
    expires = datetime.fromtimestamp(minted.claims["exp"], UTC)
    expires_at = expires.isoformat().replace("+00:00", "Z")
    if as_json:
        click.echo(json.dumps({"token": minted.token, "algorithm": minted.algorithm,
                               "expiresAt": expires_at, "claims": minted.claims}, indent=2))
    else:
        click.echo(minted.token)
    bound = "" if tenant is None else f" of tenant {label(tenant)!r}"
    click.echo(f"{role} token for {sub!r}{bound}, {minted.algorithm}, expires {expires_at}",
               err=True)
    if not auth.enabled:
        click.echo("note: JWT_ENABLED is not 'true' here: a broker started with this "
                   "environment accepts every request without a token", err=True)
