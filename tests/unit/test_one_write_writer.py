"""broker/one_write.py's writer over a real socket pair: what reaches the peer, and when."""

from __future__ import annotations

import asyncio
import socket

from broker.one_write import OneWriteWriter, is_final_head

HEAD = b"HTTP/1.1 200 \r\ncontent-length: 2\r\n\r\n"


def test_only_a_whole_final_head_is_held() -> None:
    assert is_final_head(HEAD)
    assert not is_final_head(b"HTTP/1.1 100 \r\n\r\n")  # interim: the client waits for it
    assert not is_final_head(b"HTTP/1.1 101 \r\nupgrade: h2c\r\n\r\n")
    assert not is_final_head(HEAD + b"{}")  # a head with its body is not held
    assert not is_final_head(b"{}")


async def test_the_head_leaves_with_the_next_write_or_the_close() -> None:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    _, writer = await asyncio.open_connection(sock=ours)
    one = OneWriteWriter(writer)
    loop = asyncio.get_running_loop()
    one.write(HEAD)
    await one.drain()
    await asyncio.sleep(0.05)
    try:
        theirs.recv(100)
        raise AssertionError("the head left alone")
    except BlockingIOError:
        pass
    one.write(b"{}")
    await one.drain()
    assert await loop.sock_recv(theirs, 1000) == HEAD + b"{}"
    one.write(HEAD)  # a head whose answer is cut short goes out at the close
    assert one.get_extra_info("peername") == writer.get_extra_info("peername")
    assert one.transport is writer.transport  # anything else is the real writer's
    one.close()
    await one.wait_closed()
    assert await loop.sock_recv(theirs, 1000) == HEAD
    theirs.close()
