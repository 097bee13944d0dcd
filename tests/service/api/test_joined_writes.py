"""One write per answer (issue 52): the head of an answer waits for its body and goes out with it;
a ``100 Continue`` before the answer, and the later chunks of a streamed body, are not held."""

from __future__ import annotations

import asyncio
from typing import Any

from service.api.connections import _JoinedWrites


class Transport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, parts: Any) -> None:
        self.calls.append(("writelines", tuple(parts)))

    def close(self) -> None:
        self.calls.append(("close", None))

    def is_closing(self) -> bool:
        return False


class Cycle:
    response_started = False


def test_the_head_goes_out_with_the_first_body_write_and_nothing_else_is_held() -> None:
    transport, cycle = Transport(), Cycle()
    joined = _JoinedWrites(transport, cycle)  # type: ignore[arg-type]
    joined.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the answer starts: at once
    cycle.response_started = True
    joined.write(b"HTTP/1.1 200 OK\r\n\r\n")  # the head: held
    assert transport.calls == [("write", b"HTTP/1.1 100 Continue\r\n\r\n")]
    joined.write(b"chunk 1")
    joined.write(b"chunk 2")
    assert transport.calls[1:] == [
        ("writelines", (b"HTTP/1.1 200 OK\r\n\r\n", b"chunk 1")),
        ("write", b"chunk 2"),
    ]
    assert joined.is_closing() is False  # the rest is the transport's


def test_a_head_without_a_body_is_written_when_the_connection_closes() -> None:
    transport, cycle = Transport(), Cycle()
    joined = _JoinedWrites(transport, cycle)  # type: ignore[arg-type]
    cycle.response_started = True
    joined.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
    joined.close()
    assert transport.calls == [("write", b"HTTP/1.1 500 Internal Server Error\r\n\r\n"), ("close", None)]


def test_uvicorn_through_the_joined_writes_answers_head_and_body() -> None:
    """Through uvicorn's own cycle and GuardedHttp: the client reads the whole answer."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await receive()
        body = b'{"ok":true}'
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"11")]})
        await send({"type": "http.response.body", "body": body})

    async def main() -> bytes:
        import uvicorn

        from service.api.connections import GuardedHttp

        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, http=GuardedHttp, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        head = await reader.readuntil(b"\r\n\r\n")
        body = await reader.readexactly(11)
        writer.close()
        server.should_exit = True
        await task
        return head + body

    answer = asyncio.run(main())
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b'\r\n\r\n{"ok":true}')
