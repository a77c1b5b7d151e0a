"""The KIP-848 consumer group protocol (`group.protocol=consumer`), declined as a Kafka broker
with it off declines it.

Only the classic protocol is served (broker/kafka/groups.py). A Kafka broker without KIP-848
still lists ConsumerGroupHeartbeat in its ApiVersions answer and answers every heartbeat
UNSUPPORTED_VERSION; so does this listener. Clients then give up clearly: librdkafka takes
that answer as a fatal error of the consumer ("ConsumerGroupHeartbeat fatal error: Broker:
Unsupported version"), the Java consumer names group.protocol=classic as the remedy. Not
listing the API instead leaves librdkafka looking for a coordinator that can take the
heartbeat, for ever and without a word.
"""

from __future__ import annotations

from typing import Any

from broker.kafka import errors
from broker.kafka.protocol import Request
from broker.kafka.session import Session

DECLINED = ("this broker serves only the classic consumer group protocol: "
            "set group.protocol=classic")


async def heartbeat(session: Session, request: Request) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": errors.UNSUPPORTED_VERSION,
            "error_message": DECLINED, "member_epoch": -1, "heartbeat_interval": 0}
