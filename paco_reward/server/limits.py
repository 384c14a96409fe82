"""Limits on how a request reaches a uvicorn server, whatever its framing: the reward server,
the gateway and ``paco-data annotate`` hold their body limits with the first, and their
receive deadlines with the second.

* :class:`BodyLimitMiddleware` (ASGI) answers instead of the app once a body exceeds its limit,
  by the ``Content-Length`` it declares or by the bytes actually received: a chunked body, or
  one sent with both ``Transfer-Encoding: chunked`` and a small ``Content-Length`` (h11 then
  reads the chunks), is counted as it arrives, so no more than the limit is ever held.
* :func:`request_deadline_protocol` is uvicorn's h11 protocol with a deadline on receiving a
  request: a client that sends half a request (head or body) and stalls, or trickles it, is
  disconnected. uvicorn itself only times out idle keep-alive connections, and resets that
  timer on every byte received.
* :func:`uvicorn_options`: that protocol with a server's concurrency limit, shutdown
  bound and access log, as ``paco-reward serve`` and ``paco-reward gateway`` run uvicorn.

    >>> app.add_middleware(BodyLimitMiddleware, max_bytes=65536, too_large=refusal)  # doctest: +SKIP
    >>> uvicorn.run(app, http=request_deadline_protocol(10.0))                       # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

# A Content-Length of more digits than this is over any limit (and int() of a long digit
# string costs time, or raises past 4,300 digits).
MAX_LENGTH_DIGITS = 18


class BodyLimitMiddleware:
    """Pure ASGI middleware: reads a request's body before the app does and answers
    ``too_large()`` instead of the app once the body exceeds ``max_bytes`` (by its
    Content-Length, or while it streams in), so the app never sees a larger one. A
    Content-Length that is not a number counts as too large; a client that disconnects
    before its body is complete gets no answer.

    Args:
        app: the ASGI app it wraps.
        max_bytes: the largest body passed on.
        too_large: makes the response (an ASGI app, e.g. a ``JSONResponse`` in the server's
            error format) sent for a larger body.
    """

    def __init__(self, app, max_bytes: int, too_large: Callable[[], Any]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.too_large = too_large

    def _declared_too_large(self, scope) -> bool:
        length = dict(scope["headers"]).get(b"content-length")
        if length is None:
            return False
        return (
            not length.isdigit() or len(length) > MAX_LENGTH_DIGITS or int(length) > self.max_bytes
        )

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._declared_too_large(scope):
            await self.too_large()(scope, receive, send)
            return
        # Whatever the header said: h11 may be reading chunks past it.
        chunks, total, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await self.too_large()(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class RequestDeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request (head and body) has not
    arrived whole ``request_timeout`` seconds after the connection opened or the previous
    request's bytes began. A request that has arrived is never timed out, however long the
    app takes to answer it."""

    def __init__(self, *args, request_timeout: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.request_timeout = request_timeout
        self.request_deadline: asyncio.TimerHandle | None = None

    def _watch_request(self) -> None:
        # IDLE: waiting for (the rest of) a request head; SEND_BODY: for the rest of its body.
        receiving = self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
        if receiving and self.request_deadline is None:
            self.request_deadline = self.loop.call_later(self.request_timeout, self._too_slow)
        elif not receiving and self.request_deadline is not None:
            self.request_deadline.cancel()
            self.request_deadline = None

    def _too_slow(self) -> None:
        self.request_deadline = None
        if not self.transport.is_closing():
            logger.info(
                "closed the connection of %s: its request did not arrive within %gs",
                "{}:{}".format(*self.client) if self.client else "a client",
                self.request_timeout,
            )
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._watch_request()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_request()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.request_deadline is not None:
            self.request_deadline.cancel()
            self.request_deadline = None
        super().connection_lost(exc)


def request_deadline_protocol(request_timeout: float) -> Callable[..., H11Protocol]:
    """The ``http=`` argument of ``uvicorn.run`` / ``uvicorn.Config`` for h11 with a deadline
    of ``request_timeout`` seconds on receiving each request (see
    :class:`RequestDeadlineH11Protocol`).

    >>> request_deadline_protocol(10.0).keywords
    {'request_timeout': 10.0}
    """
    return functools.partial(RequestDeadlineH11Protocol, request_timeout=request_timeout)


def uvicorn_log_config(access_log: bool) -> dict[str, Any]:
    """uvicorn's logging config with its own messages at WARNING and, with ``access_log``,
    its access log (one line per request on stdout: client, request line, status) at INFO.
    (uvicorn's ``log_level`` sets both loggers to one level, so a quiet server could not keep
    a request log.)

    >>> uvicorn_log_config(True)["loggers"]["uvicorn.access"]["level"]
    'INFO'
    """
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["uvicorn"]["level"] = "WARNING"
    config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    config["loggers"]["uvicorn.access"]["level"] = "INFO" if access_log else "WARNING"
    return config


def uvicorn_options(limits) -> dict[str, Any]:
    """The ``uvicorn.run`` / ``uvicorn.Config`` keyword arguments of a server's
    :class:`~paco_reward.server.config.ConnectionLimits` (a ``ServerConfig`` or a
    ``GatewayConfig``): h11 with the request deadline, the concurrency limit, the
    graceful-shutdown bound and the access log (off by default).

    >>> from paco_reward.server.config import ConnectionLimits
    >>> options = uvicorn_options(ConnectionLimits(request_timeout=5, max_connections=8))
    >>> options["limit_concurrency"], options["timeout_graceful_shutdown"], options["access_log"]
    (8, 10.0, False)
    """
    return {
        "http": request_deadline_protocol(limits.request_timeout),
        "limit_concurrency": limits.max_connections,
        "timeout_graceful_shutdown": limits.shutdown_timeout,
        "access_log": limits.access_log,
        "log_level": None,  # the levels are log_config's
        "log_config": uvicorn_log_config(limits.access_log),
    }
