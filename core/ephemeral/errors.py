"""The refusals of §19, each with the `code` its answer carries (`{"error", "code"}`)."""

from __future__ import annotations

from core.errors import BadRequest, NotFound, Overloaded, QueenError, ServiceError


class EphemeralError(QueenError):
    """A refusal of an ephemeral route."""

    code = "ephemeral_error"


class EphemeralBadRequest(BadRequest, EphemeralError):
    """The ephemeral request is malformed."""

    code = "ephemeral_bad_request"


class EphemeralQueueNotFound(NotFound, EphemeralError):
    """The ephemeral queue does not exist."""

    code = "ephemeral_queue_not_found"


class QueueFull(Overloaded, EphemeralError):
    """The ephemeral queue is full (maxLength or maxBytes) and its policy rejects pushes."""

    code = "queue_full"


class EphemeralUnavailable(ServiceError, EphemeralError):
    """Ephemeral storage is unavailable or holds the deployment's ceiling of bytes."""

    code = "ephemeral_unavailable"
