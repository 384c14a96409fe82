"""paco_reward.server.limits on a real uvicorn server over loopback, driven by raw sockets as
a hostile client drives it: the body limit counts the bytes received whatever the framing,
and a request that does not arrive whole in time loses its connection."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from paco_reward.server import ServerThread
from paco_reward.server.limits import BodyLimitMiddleware, request_deadline_protocol
from tests.raw_http import chunked, connect, head, read_response, seconds_until_closed

LIMIT = 4096
DEADLINE = 0.5


def echo_app(seen: list[int]) -> Starlette:
    """Answers the size and hash of the body it got; ``seen`` records every body it read."""

    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        seen.append(len(body))
        return JSONResponse({"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})

    async def slow(request: Request) -> JSONResponse:
        await asyncio.sleep(3 * DEADLINE)
        return JSONResponse({"slow": True})

    refusal = Middleware(
        BodyLimitMiddleware,
        max_bytes=LIMIT,
        too_large=lambda: PlainTextResponse("too large", status_code=413),
    )
    routes = [Route("/echo", echo, methods=["POST"]), Route("/slow", slow, methods=["GET"])]
    return Starlette(routes=routes, middleware=[refusal])


@pytest.fixture
def server():
    """The echo app on uvicorn with a request deadline of ``DEADLINE`` seconds."""
    seen: list[int] = []
    with ServerThread(echo_app(seen), http=request_deadline_protocol(DEADLINE)) as running:
        running.seen = seen
        yield running


def post_chunked(server, body: bytes, content_length: str | None, whole: bool = True):
    headers = {"Transfer-Encoding": "chunked"}
    if content_length is not None:
        headers["Content-Length"] = content_length
    with connect(server.port) as sock:
        sock.sendall(head("POST", "/echo", server.port, headers))
        chunks = list(chunked(body, size=1024))
        # Not whole: the first 4 KiB past the limit, then wait for the answer.
        for chunk in chunks if whole else chunks[: LIMIT // 1024 + 4]:
            sock.sendall(chunk)
        return read_response(sock)


@pytest.mark.parametrize("content_length", [None, "100"], ids=["chunked", "chunked-and-length"])
def test_a_body_is_counted_as_it_arrives_whatever_its_framing(server, content_length):
    small = bytes(range(256)) * 8  # 2 KiB, under the limit: passed on intact
    status, _, payload = post_chunked(server, small, content_length)
    assert status == 200
    assert json.loads(payload) == {"bytes": len(small), "sha256": hashlib.sha256(small).hexdigest()}
    # 16 MiB behind a Content-Length of 100 (h11 reads the chunks): refused at the limit.
    status, _, payload = post_chunked(server, b" " * 2**24, content_length)
    assert (status, payload) == (413, b"too large")
    # ... as soon as the limit is passed: the answer comes while most of the body is unsent.
    status, _, payload = post_chunked(server, b" " * 2**24, content_length, whole=False)
    assert (status, payload) == (413, b"too large")
    assert server.seen == [len(small)]


def test_a_declared_length_over_the_limit_is_refused_before_reading(server):
    with connect(server.port) as sock:
        sock.sendall(head("POST", "/echo", server.port, {"Content-Length": str(LIMIT + 1)}))
        status, _, payload = read_response(sock)  # no body sent at all
    assert (status, payload) == (413, b"too large")
    # A length of thousands of digits (h11 refuses it; another server may pass it on).
    client = TestClient(echo_app(server.seen))
    response = client.post("/echo", content=b"x", headers={"Content-Length": "9" * 5000})
    assert response.status_code == 413
    assert server.seen == []


@pytest.mark.parametrize(
    "sent, trickle",
    [
        (b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le", b""),
        (b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 50, b""),
        (b"", b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: y\r\n" * 20),
    ],
    ids=["half-a-head", "half-a-body", "trickled-head"],
)
def test_a_request_that_does_not_arrive_in_time_loses_its_connection(server, sent, trickle):
    with connect(server.port) as sock:
        sock.sendall(sent)
        closed_after = seconds_until_closed(sock, limit=10 * DEADLINE, trickle=trickle)
    assert closed_after is not None, "the server kept a half-sent request's connection open"
    assert closed_after < 6 * DEADLINE
    assert server.seen == []


def test_the_deadline_starts_again_for_each_request_and_spares_slow_answers(server):
    with connect(server.port) as sock:
        # The app takes 3 deadlines to answer a request that has arrived: it is not cut.
        sock.sendall(head("GET", "/slow", server.port, {}))
        assert read_response(sock)[0] == 200
        # The same connection, kept alive: the next request arrives in time, piecewise.
        request = head("POST", "/echo", server.port, {"Content-Length": "5"}) + b"hello"
        sock.sendall(request[:10])
        time.sleep(DEADLINE / 3)
        sock.sendall(request[10:])
        status, _, payload = read_response(sock)
        assert status == 200 and json.loads(payload)["bytes"] == 5
        # Then half a request (uvicorn's keep-alive timer stops at its first byte).
        sock.sendall(request[:10])
        closed_after = seconds_until_closed(sock, limit=10 * DEADLINE)
    assert closed_after is not None and closed_after < 6 * DEADLINE
