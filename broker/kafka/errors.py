"""Kafka error codes this listener answers, and which of our errors become which."""

from __future__ import annotations

from core.errors import (
    CapacityExceeded,
    ClientError,
    Overloaded,
    QueenError,
    QuotaExceeded,
    QuotaTooLarge,
)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
FETCH_SESSION_ID_NOT_FOUND = 70
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
INVALID_RECORD = 87


def code_of(error: QueenError) -> int:
    """A push's failure as a Produce error code: a full queue is a policy refusal; anything
    the client sent wrong is an invalid record; everything else (the database down, the write
    backlog full) a storage error, which clients retry."""
    if isinstance(error, CapacityExceeded | QuotaExceeded):  # a tenant's quota too
        return POLICY_VIOLATION
    if isinstance(error, QuotaTooLarge):
        return MESSAGE_TOO_LARGE
    if isinstance(error, ClientError):
        return INVALID_RECORD
    if isinstance(error, Overloaded):
        return NOT_ENOUGH_REPLICAS
    return KAFKA_STORAGE_ERROR
