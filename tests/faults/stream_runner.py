"""A stream runner in a process of its own, for kill tests: the window pipeline of
tests/integration/test_streams.py (`window_stream`) over SOURCE into SINK, until killed.

    python -m tests.faults.stream_runner URL SOURCE SINK
"""

from __future__ import annotations

import asyncio
import sys

from queen import Queen

from tests.integration.test_streams import window_stream


async def main(url: str, source: str, sink: str) -> None:
    client = Queen(url)
    await window_stream(client, source, sink).run(
        query_id=source, url=url, max_wait_millis=200, batch_size=7)
    print("running", flush=True)
    await asyncio.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
