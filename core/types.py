"""The core's public vocabulary: what the edges (broker/: the HTTP routes, their bodies and
codecs, the Kafka listener) build and hand to `Broker` (core/service.py), what they get
back, and the request rules they apply before building it: pushes (§4.1: `PushItem`, its
`NewMessage`, a client-built segment `PackedFrames`, `PushOutcome`), pops (§4.2-4.4:
`PopRequest` with its conflation rules and first-contact rule, `Pilot`, `PopResult` and
its `Claim`s), acks (§4.5-4.6), transactions with the ops of other stores that ride them
(§4.7, extensions §17) and reads by offset (`POST /api/v1/fetch`).

The edges name these here and never import `core.engine` or `core.storage` (an import-linter
contract in pyproject.toml); where each is defined is the engine's business. The formats the
edges share with the engine have modules of their own: storage frames and segments
(`core.segments`), queue options (`core.options`), Kafka records as messages
(`core.kafka.messages`).
"""

from __future__ import annotations

from core.engine.ack import AckItem, AckOutcome, GroupAck, parse_status
from core.engine.autopilot import Pilot
from core.engine.conflation import check_conflation, conflation_width
from core.engine.fetch import FetchEntry, FetchResult
from core.engine.pop import QUEUE_MODE, Claim, PopRequest, PopResult, requested_seed
from core.engine.push import PushItem, PushOutcome
from core.engine.transactions import Rider, RiderOutcome
from core.engine.writes import DEFAULT_PARTITION, NewMessage, PackedFrames

__all__ = [
    "DEFAULT_PARTITION", "QUEUE_MODE", "AckItem", "AckOutcome", "Claim", "FetchEntry",
    "FetchResult", "GroupAck", "NewMessage", "PackedFrames", "Pilot", "PopRequest", "PopResult",
    "PushItem", "PushOutcome", "Rider", "RiderOutcome", "check_conflation", "conflation_width",
    "parse_status", "requested_seed",
]
