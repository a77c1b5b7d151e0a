"""glibc's allocator in the broker's serving processes (a web worker, the Kafka listener):
freed buffers are kept for the next request instead of going back to the kernel.

A request at production batch sizes moves buffers of a few hundred KB: a push of 100
messages is a 116 KB body, a JSON pop of 500 answers about 600 KB, and the answer is joined,
encoded and written as more such buffers. glibc maps a block that large afresh (its mmap
threshold starts at 128 KiB and only follows the largest block freed so far) and returns the
top of its heap once more than a trim threshold is free there, so each request's buffers
were new pages: building the answer of a pop of 500 took 336 page faults, 1.8 µs of system
time per message beside 2.5 µs of its own work (a script timing `messages_array` on the step
cost probe's delivery). With both thresholds fixed above those sizes, the pages are reused:
no faults.

What it costs: up to TRIM_THRESHOLD of freed memory stays with each process, and blocks up
to MMAP_THRESHOLD come from the heap, where a long-lived one can hold freed space beneath it.
An operator who sets glibc's own variables (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_)
keeps them: nothing is changed then.
"""

from __future__ import annotations

import ctypes
import os

# mallopt's parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Well above the buffers of requests at production batch sizes; a larger block (a body or an
# answer of many MB, rare) is still mapped for itself and unmapped when freed.
MMAP_THRESHOLD = 8 << 20
TRIM_THRESHOLD = 64 << 20

_OPERATORS_OWN = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> bool:
    """Fix glibc's thresholds (see the module docstring); answer whether they were set (not on
    another C library, nor when the operator set glibc's variables)."""
    if any(name in os.environ for name in _OPERATORS_OWN):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt answers 1 on success; musl's answers 0 and does nothing.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
