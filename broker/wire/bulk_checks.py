"""The checks of broker/wire/types.py applied to a whole batch at once, for the fast paths
that decode a push or an ack batch as plain strings (broker/wire/push.py, ack.py).

A batch's items mostly share their names (queue, partition, group, lease), so each distinct
value is checked once; transactionIds differ per item and are checked together, in one
regex pass over all of them. Each function answers whether every value passes exactly the
check its wire type applies, or refuses with ValueError/TypeError as that check does: the
caller then decodes the body again the strict way, which words the refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from broker.wire.types import MAX_TRANSACTION_ID_BYTES
from core.names import CONTROL_RE

# A transactionId of at most this many characters is within the byte limit whatever they
# are (4 bytes of UTF-8 at most each); a longer one is left to the strict path.
_SHORT_TXID = MAX_TRANSACTION_ID_BYTES // 4


def each_distinct(values: Iterable[Any], check: Callable[[Any], object]) -> None:
    """`check` every distinct value that is not None; raises what the check raises."""
    for value in set(values):
        if value is not None:
            check(value)


def transaction_ids_pass(txids: list[str]) -> bool:
    """Whether every (non-empty) transactionId passes the transactionId rule, decided
    without a check per id; False also when one is too long to decide quickly."""
    txids = [t for t in txids if t]
    if not txids:
        return True
    return max(map(len, txids)) <= _SHORT_TXID and CONTROL_RE.search("".join(txids)) is None
