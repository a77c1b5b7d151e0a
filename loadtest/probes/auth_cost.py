"""The cost of JWT auth on push throughput, measured: `python -m loadtest probe auth_cost`.

Single-message pushes from `--connections` keep-alive connections for `--seconds`, against
the broker's web workers (`queen-broker web`) on a fresh database each time, alternating
these variants `--rounds` times in the same run:

- `off`: JWT_ENABLED unset;
- `hs256`: auth on, every request carries the same HS256 token (the usual client: one token
  for its lifetime; verified once per worker, then served from the verified-token cache);
- `hs256-fresh`: auth on, every request carries a token the broker has not seen recently
  (a pool far larger than the cache), so each one is fully verified;
- `eddsa-fresh`: the same with EdDSA tokens and a JWT_PUBLIC_KEY.

The tokens are signed before the load starts, so the generator does no signing while it
measures. Reports, per variant, push req/s and the web workers' CPU time per push (user +
system of the broker's process tree over the measured window, divided by the pushes
answered), each with its ratio to `off` (medians over the rounds, and the per-round ratios).
On a shared machine the CPU per push is the steadier figure: throughput moves with whatever
else runs on the cores, while the work a push costs the broker does not. Load goes only to 127.0.0.1; loops are bounded by time; only processes
this command started are signalled.
"""

from __future__ import annotations

import time
import uuid

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from loadtest import launch
from loadtest.probes.rounds import FAST_DATABASE, Rounds, arguments, cpu_seconds, in_turn
from loadtest.probes.supervision import RequestTally, _load

SECRET = "loadtest-secret-" + "x" * 32
FRESH_TOKENS = 40_000  # ten times the broker's verified-token cache per worker


def _tokens(key: object, algorithm: str, count: int) -> list[str]:
    now = int(time.time())
    return [jwt.encode({"sub": f"producer-{i}", "role": "write-only", "iat": now,
                        "exp": now + 3600, "jti": uuid.uuid4().hex}, key,  # type: ignore[arg-type]
                       algorithm=algorithm) for i in range(count)]


def variants() -> dict[str, tuple[dict[str, str], list[str] | None]]:
    ed = ed25519.Ed25519PrivateKey.generate()
    pem = ed.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    hs_env = {"JWT_ENABLED": "true", "JWT_SECRET": SECRET}
    return {
        "off": ({}, None),
        "hs256": (hs_env, _tokens(SECRET, "HS256", 1)),
        "hs256-fresh": (hs_env, _tokens(SECRET, "HS256", FRESH_TOKENS)),
        "eddsa-fresh": ({"JWT_ENABLED": "true", "JWT_ALGORITHM": "EdDSA",
                         "JWT_PUBLIC_KEY": pem}, _tokens(ed, "EdDSA", FRESH_TOKENS)),
    }


def throughput(dsn: str, env: dict[str, str], tokens: list[str] | None, workers: int,
               connections: int, seconds: float) -> tuple[float, float]:
    """Push req/s, and broker CPU microseconds per push."""
    url = str(launch.run_sync(launch.fresh_database(dsn)))
    with launch.broker(url, workers, env=env) as server:
        assert server.proc is not None
        launch.run_sync(_load(server.port, connections, 1.0, tokens))
        cpu = cpu_seconds(server.proc.pid)
        tally = launch.run_sync(_load(server.port, connections, seconds, tokens))
        cpu = cpu_seconds(server.proc.pid) - cpu
        assert isinstance(tally, RequestTally)
        if tally.failed:
            raise RuntimeError(f"{tally.failed} pushes failed (auth misconfigured?)")
    return tally.ok / seconds, cpu / max(tally.ok, 1) * 1e6


def main(argv: list[str] | None = None) -> int:
    args = arguments("auth_cost", __doc__ or "", seconds=5.0).parse_args(argv)
    setups = variants()
    rounds = Rounds("auth_cost", args)
    with launch.Postgres(FAST_DATABASE if args.fast_database else None) as pg:
        for r in range(args.rounds):
            for name in in_turn(list(setups), r):
                env, tokens = setups[name]
                rate, cpu = throughput(pg.dsn, env, tokens, args.workers, args.connections,
                                       args.seconds)
                rounds.add(f"{name} push req/s", rate)
                rounds.add(f"{name} broker CPU us per push", cpu)
            rounds.end_round()
    for name in setups:
        if name != "off":
            rounds.ratio(f"{name} / off push req/s", f"{name} push req/s", "off push req/s")
            rounds.ratio(f"{name} / off broker CPU per push", f"{name} broker CPU us per push",
                         "off broker CPU us per push")
    return rounds.finish()


if __name__ == "__main__":
    raise SystemExit(main())
