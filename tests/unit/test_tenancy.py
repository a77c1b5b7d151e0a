"""Tenants in memory (docs/security/tenants.md): how a request's tenant is decided
(broker/tenancy.py), tenant names and scoped keys, quota bodies, token buckets, and one
process's share of a tenant's limits (core/tenancy/limiter.py)."""

from __future__ import annotations

import ipaddress

import pytest

from broker.auth.access import Role
from broker.auth.errors import Forbidden
from broker.auth.gate import Identity
from broker.tenancy import DEFAULT, Tenancy, resolve
from core.env import SettingsError
from core.errors import (
    BadRequest,
    QuotaExceeded,
    QuotaTooLarge,
    RateLimited,
    StorageQuotaExceeded,
)
from core.tenancy.buckets import TokenBucket, retry_after
from core.tenancy.limiter import Limiter
from core.tenancy.names import check_tenant, tenant_from_path, tenant_in_path
from core.tenancy.quotas import Quota, quota_from_wire
from core.tenancy.scoped import belongs, scoped, unscoped
from core.tenancy.settings import TenancySettings, tenancy_settings_from_env

PROXY = TenancySettings(trusted_proxies=(ipaddress.ip_network("10.0.0.0/8"),))
ADMIN = Identity(None, frozenset({Role.ADMIN}))
WRITER = Identity(None, frozenset({Role.READ_WRITE}))
BOUND = Identity("acme", frozenset({Role.ADMIN}), tenant="acme")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- which tenant ----------------------------------------------------------------------------

def test_a_token_claim_binds_the_request_whatever_the_peer() -> None:
    assert resolve(BOUND, None, "10.1.2.3", settings=PROXY, auth_on=True) == \
        Tenancy("acme", bound=True, named=True)
    assert resolve(BOUND, "acme", "192.0.2.1", settings=PROXY, auth_on=True).bound


def test_a_header_naming_another_tenant_than_the_claim_is_refused() -> None:
    with pytest.raises(Forbidden, match="bound to tenant 'acme'"):
        resolve(BOUND, "globex", "10.1.2.3", settings=PROXY, auth_on=True)


def test_a_trusted_proxys_header_binds_the_request() -> None:
    assert resolve(WRITER, "globex", "10.9.9.9", settings=PROXY, auth_on=True) == \
        Tenancy("globex", bound=True, named=True)


def test_an_admin_token_names_a_tenant_without_being_bound_to_it() -> None:
    assert resolve(ADMIN, "globex", "192.0.2.1", settings=PROXY, auth_on=True) == \
        Tenancy("globex", bound=False, named=True)


def test_a_client_never_chooses_its_tenant_with_auth_on() -> None:
    with pytest.raises(Forbidden, match="trusted proxy or an admin token"):
        resolve(WRITER, "globex", "192.0.2.1", settings=PROXY, auth_on=True)


def test_with_auth_off_the_header_names_the_tenant_for_anyone() -> None:
    anonymous = Identity(None, frozenset())
    assert resolve(anonymous, "globex", "192.0.2.1", settings=TenancySettings(),
                   auth_on=False) == Tenancy("globex", named=True)


def test_no_claim_and_no_header_is_the_default_tenant_unbound() -> None:
    for header in (None, "", "   "):
        tenancy = resolve(WRITER, header, "10.0.0.1", settings=PROXY, auth_on=True)
        assert tenancy == DEFAULT and tenancy.every_tenant and tenancy.operator


def test_a_header_that_names_no_tenant_is_a_400_naming_it() -> None:
    with pytest.raises(BadRequest, match="invalid x-queen-tenant header"):
        resolve(ADMIN, "a b", None, settings=PROXY, auth_on=True)


# -- names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["acme", "00000000-0000-0000-0000-000000000001", "a.b_c:d@e-f",
                                  "x" * 128, ""])
def test_tenant_names_that_are_valid(name: str) -> None:
    assert check_tenant(name) == name


@pytest.mark.parametrize("name", ["_default", "-a", "a b", "a/b", "a\x1fb", "x" * 129, "é"])
def test_tenant_names_that_are_not(name: str) -> None:
    with pytest.raises(ValueError):
        check_tenant(name)


def test_the_default_tenant_is_spelled_default_in_a_path() -> None:
    assert tenant_in_path("") == "_default" and tenant_from_path("_default") == ""
    assert tenant_from_path(tenant_in_path("acme")) == "acme"


def test_scoped_keys_split_back_and_tell_their_tenant() -> None:
    assert scoped("", "orders") == "orders"
    key = scoped("acme", "orders")
    assert key != "orders" and unscoped(key) == ("acme", "orders")
    assert unscoped("orders") == ("", "orders")
    assert belongs(key, "acme") and not belongs(key, "") and not belongs(key, "acm")
    assert belongs("orders", "") and not belongs("orders", "acme")


def test_tenancy_settings_from_the_environment() -> None:
    s = tenancy_settings_from_env({"QUEEN_TENANT_HEADER": "X-Tenant",
                                   "QUEEN_TENANT_TRUSTED_PROXIES": "10.0.0.0/8, ::1"})
    assert s.header == "x-tenant" and s.trusts("10.2.3.4") and s.trusts("::1")
    assert not s.trusts("192.0.2.1") and not s.trusts(None) and not s.trusts("nonsense")
    with pytest.raises(SettingsError, match="QUEEN_TENANT_TRUSTED_PROXIES"):
        tenancy_settings_from_env({"QUEEN_TENANT_TRUSTED_PROXIES": "10.0.0.0/99"})
    with pytest.raises(SettingsError, match="QUEEN_TENANT_HEADER"):
        tenancy_settings_from_env({"QUEEN_TENANT_HEADER": "bad header"})
    assert s.refusal_delay_ms == 250  # a 429 for a rate is held a quarter of a second
    assert tenancy_settings_from_env(
        {"QUEEN_TENANT_REFUSAL_DELAY_MS": "0"}).refusal_delay_ms == 0
    with pytest.raises(SettingsError, match="QUEEN_TENANT_REFUSAL_DELAY_MS"):
        tenancy_settings_from_env({"QUEEN_TENANT_REFUSAL_DELAY_MS": "-1"})


# -- quota bodies ------------------------------------------------------------------------------

def test_a_quota_from_wire_names_keeps_what_it_does_not_name() -> None:
    base = Quota(requests_per_second=10.0, max_queues=3)
    quota = quota_from_wire({"maxQueues": None, "messagesPerSecond": 5}, base=base)
    assert quota == Quota(requests_per_second=10.0, messages_per_second=5.0)
    assert quota.as_wire()["requestsPerSecond"] == 10.0


@pytest.mark.parametrize("body, reason", [
    ({"maxQueus": 3}, "unknown quota field 'maxQueus'"),
    ({"maxQueues": 0}, "maxQueues must be from 1"),
    ({"maxQueues": 1.5}, "maxQueues must be a whole number"),
    ({"maxQueues": True}, "maxQueues must be a positive number"),
    ({"requestsPerSecond": -1}, "requestsPerSecond must be above 0"),
    ({"requestsPerSecond": float("nan")}, "requestsPerSecond must be above 0"),
    ({"maxQueues": 2**31}, "maxQueues must be from 1 to 2147483647"),
])
def test_a_quota_body_that_is_wrong_names_the_field(body: dict[str, object],
                                                     reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        quota_from_wire(body)


# -- buckets ----------------------------------------------------------------------------------

def test_a_bucket_admits_its_burst_then_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, 20.0, clock=clock)
    assert all(bucket.take(1) == 0 for _ in range(20))
    wait = bucket.take(1)
    assert wait == pytest.approx(0.1)
    clock.now += 0.5
    assert sum(1 for _ in range(10) if bucket.take(1) == 0) == 5


def test_a_take_larger_than_the_burst_passes_only_on_a_full_bucket_and_owes_the_rest() -> None:
    clock = Clock()
    bucket = TokenBucket(10.0, 20.0, clock=clock)
    assert bucket.take(50) == 0  # full: let through, 30 owed
    wait = bucket.take(1)
    assert wait == pytest.approx(3.1)  # the debt, then one token
    clock.now += 5.0  # 30 paid back, 20 refilled: full again
    assert bucket.take(50) == 0


def test_retry_after_is_whole_seconds_from_1_to_60() -> None:
    assert [retry_after(w) for w in (0.01, 1.0, 1.2, 59.5, 600)] == [1, 1, 2, 60, 60]


# -- one process's share ----------------------------------------------------------------------

def test_each_of_n_processes_admits_its_share_of_the_rate_and_burst() -> None:
    clock = Clock()
    limiter = Limiter(clock=clock)
    limiter.load({"a": Quota(requests_per_second=40.0, request_burst=40)}, processes=4,
                 full=frozenset())
    admitted = 0
    for _ in range(100):
        try:
            limiter.admit_request("a")
            admitted += 1
        except RateLimited as limited:
            assert limited.code == "rate_limited" and limited.retry_after_seconds == 1
    assert admitted == 10  # a quarter of the burst
    clock.now += 1.0
    admitted = sum(1 for _ in range(100) if _admits(limiter, "a"))
    assert admitted == 10  # a quarter of the rate


def test_a_share_grows_back_when_processes_leave() -> None:
    clock = Clock()
    limiter = Limiter(clock=clock)
    quota = {"a": Quota(requests_per_second=10.0, request_burst=10)}
    limiter.load(quota, processes=5, full=frozenset())
    assert sum(1 for _ in range(20) if _admits(limiter, "a")) == 2
    limiter.load(quota, processes=1, full=frozenset())
    clock.now += 1.0
    assert sum(1 for _ in range(20) if _admits(limiter, "a")) == 10


def test_a_tenant_without_a_quota_and_the_others_are_never_limited() -> None:
    limiter = Limiter(clock=Clock())
    limiter.load({"a": Quota(requests_per_second=1.0, request_burst=1)}, processes=1,
                 full=frozenset())
    assert sum(1 for _ in range(50) if _admits(limiter, "a")) == 1
    assert sum(1 for _ in range(50) if _admits(limiter, "b")) == 50
    assert sum(1 for _ in range(50) if _admits(limiter, "")) == 50


def test_message_rate_batch_and_payload_caps() -> None:
    limiter = Limiter(clock=Clock())
    limiter.load({"a": Quota(messages_per_second=10.0, message_burst=10, max_batch_size=5,
                             max_payload_bytes=100)}, processes=1, full=frozenset())
    with pytest.raises(QuotaTooLarge, match=r"batch of 6 items exceeds maxBatchSize \(5\)"):
        limiter.check_batch("a", [1] * 6)
    with pytest.raises(QuotaTooLarge, match=r"item 1: payload 101 bytes exceeds "
                                            r"maxPayloadBytes \(100\)"):
        limiter.check_batch("a", [100, 101])
    limiter.admit_messages("a", 10)
    with pytest.raises(RateLimited, match="message rate limit exceeded"):
        limiter.admit_messages("a", 1)


def test_the_storage_block_and_the_retention_ceiling() -> None:
    limiter = Limiter(clock=Clock())
    limiter.load({"a": Quota(max_retention_seconds=3600, max_stored_bytes=10)}, processes=1,
                 full=frozenset({"a"}))
    with pytest.raises(StorageQuotaExceeded) as blocked:
        limiter.check_storage("a")
    assert blocked.value.code == "storage_quota_exceeded"
    assert blocked.value.message == "storage quota exceeded; pushes blocked"
    limiter.check_storage("b")
    limiter.check_retention("a", {"retentionSeconds": 3600, "completedRetentionSeconds": 0})
    with pytest.raises(QuotaExceeded, match=r"retentionSeconds of 3601s exceeds the "
                                            r"tenant's maxRetentionSeconds \(3600s\)"):
        limiter.check_retention("a", {"retentionSeconds": 3601})


def test_parked_places_are_a_share_rounded_up_and_given_back() -> None:
    limiter = Limiter(clock=Clock())
    limiter.load({"a": Quota(max_parked_pops=3)}, processes=2, full=frozenset())
    with limiter.parked("a"), limiter.parked("a"):  # ceil(3 / 2) = 2
        with pytest.raises(RateLimited, match="too many parked consumers") as over, \
                limiter.parked("a"):
            pass
        assert over.value.retry_after_seconds == 5
    assert limiter.parked_count("a") == 0
    with limiter.parked("a"):
        assert limiter.parked_count("a") == 1


def _admits(limiter: Limiter, tenant: str) -> bool:
    try:
        limiter.admit_request(tenant)
    except RateLimited:
        return False
    return True
