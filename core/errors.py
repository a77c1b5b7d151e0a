"""The errors the core raises. Two trees: the client asked wrong, or we could not.

    QueenError
    ├── ClientError            the request cannot succeed as sent; retrying will not help
    │   ├── BadRequest         malformed body, wrong types, bad names or parameters
    │   ├── PayloadTooLarge    body over the size limit, or too many items
    │   ├── CapacityExceeded   a push would take a queue past its maxSize
    │   └── NotFound           the addressed resource does not exist
    └── ServiceError           the request was fine; the broker could not serve it now
        ├── Overloaded         the write backlog is full; retry after a pause
        ├── StorageUnavailable the database cannot be reached
        │   └── StorageReadOnly    a read-only server (a standby) answered a write
        └── StorageError       the database answered with an unexpected failure
            └── StorageDeadlock    it aborted the statement to break a deadlock
    SegmentError               a stored segment cannot be decoded (a bug or corruption)

`Coded` marks an error of the extension routes (KV, locks: wire-protocol-extensions, shared
rules of §§14–17), answered as `{"error": code, "reason": reason, "detail": text}`:
`Refused` (400), `RefusedTooLarge` (413) and `CodedUnavailable` (503) sit in the tree above.

`Limited` marks a refusal by a tenant's quota (docs/security/tenants.md), answered as Queen's
proxy answers it, `{"error": text, "code": code}`: `QuotaExceeded` (403 quota_exceeded),
`StorageQuotaExceeded` (403 storage_quota_exceeded), `QuotaTooLarge` (413
payload_too_large) are client errors; `RateLimited` (429 rate_limited, with Retry-After) is
a service error (the same request succeeds later).

The message defaults to the class docstring. `broker/errors.py` maps each class to a status.
"""

from __future__ import annotations


class QueenError(Exception):
    """The broker could not complete the request."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class ClientError(QueenError):
    """The request is not valid."""


class BadRequest(ClientError):
    """The request is malformed."""


class PayloadTooLarge(ClientError):
    """The request is larger than the broker accepts."""


class CapacityExceeded(ClientError):
    """The queue would exceed its max capacity."""


class NotFound(ClientError):
    """Not found."""


class ServiceError(QueenError):
    """The broker cannot serve the request right now."""

    retry_after_seconds = 1


class Overloaded(ServiceError):
    """Too many messages are waiting to be written; retry shortly."""


class StorageUnavailable(ServiceError):
    """The database connection is unavailable; retry shortly."""

    # The text names the connection on purpose: the official client's consume loop keeps
    # polling after an error only when its text contains "connection" (or "timeout").

    retry_after_seconds = 2


class StorageReadOnly(StorageUnavailable):
    """The database connection is unavailable; retry shortly."""

    # A read-only server answered a write: a standby (a DSN without target_session_attrs),
    # or a server switched to read-only. To the client that is the database being
    # unavailable: the same text (clients that retry on "connection" retry), 503 + Retry-After
    # or, with the push spool, `buffered`; a StorageError would be neither.


class StorageError(ServiceError):
    """The database failed to complete the operation."""


class StorageDeadlock(StorageError):
    """The database aborted the statement to break a deadlock; it changed nothing."""


class SegmentError(QueenError):
    """A stored segment cannot be decoded."""


class Coded(QueenError):
    """A refusal with a stable code and reason (wire-protocol-extensions, shared rules)."""

    def __init__(self, code: str, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.reason = reason


class Refused(Coded, BadRequest):
    """The request is refused."""


class RefusedTooLarge(Coded, PayloadTooLarge):
    """Part of the request is larger than the broker accepts."""


class CodedUnavailable(Coded, ServiceError):
    """The storage behind the route cannot be reached; retry shortly."""


class Limited(QueenError):
    """A tenant's quota refuses the request."""

    code = "quota_exceeded"  # the answer's `code` (Queen's proxy codes)


class QuotaExceeded(Limited, ClientError):
    """The tenant's quota does not allow this."""


class StorageQuotaExceeded(QuotaExceeded):
    """storage quota exceeded; pushes blocked"""

    code = "storage_quota_exceeded"


class QuotaTooLarge(Limited, PayloadTooLarge):
    """The request is larger than the tenant's quota allows."""

    code = "payload_too_large"


class RateLimited(Limited, ServiceError):
    """rate limit exceeded"""

    code = "rate_limited"

    def __init__(self, message: str | None = None, *, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds
        self.wait_seconds = float(retry_after_seconds)  # exactly, when the bucket knows
