"""``paco-reward gateway``: one port in front of several OpenAI-compatible servers (vLLM,
``paco-reward serve``), each request routed to its server by the ``model`` it names.

Routes:

* ``POST`` to any path (``/v1/chat/completions``, ``/v1/score``, vLLM's ``/tokenize`` and
  ``/detokenize`` at the root, ...): forwarded to the upstream serving the body's ``model``,
  path, query, body and headers unchanged (plus the request id); the upstream's answer comes
  back as it is sent (status, headers, body, streamed: server-sent events pass one by one);
* ``GET /v1/models``: the upstreams' own entries of the served names, as they give them
  (``root``, ``paco`` and all: the remote client reads both);
* ``GET /health``: each upstream's health, 200 when every one answers, else 503 (no key).

Errors use OpenAI's body, like the server's: an unknown ``model`` is a 404 listing the
served names; an upstream that refuses the connection (or breaks it before answering) is a
502 ``upstream_unreachable``; one that does not answer in time a 504 ``upstream_timeout``.
Both name the upstream, and the remote client retries both. An upstream that breaks off a
streamed answer has its stream cut, never ended as if it were whole. The body limit and the
API key are those of ``paco-reward serve``; the client's ``Authorization`` header is passed
on, so upstreams started with the same key accept it.

    >>> app = create_gateway({"PaCo-Reward-7B": "http://127.0.0.1:8001/v1",
    ...                       "Gemma-3-4B-IT": "http://127.0.0.1:8002/v1"})   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from paco_reward.errors import ConfigError, PacoError
from paco_reward.server.common import (
    REQUEST_ID_HEADER,
    add_request_middleware,
    check_api_key,
    error_response,
    internal_error,
    request_error,
    request_id_of,
    served_entry,
)
from paco_reward.server.decode import RequestError
from paco_reward.server.gateway_config import GatewayConfig
from paco_reward.server.schemas import load_json

__all__ = ["create_gateway"]

logger = logging.getLogger(__name__)

# Headers about one connection, not the message (RFC 9110 7.6.1), and those the gateway's
# own server writes: never passed on.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", REQUEST_ID_HEADER}
NOT_RELAYED = HOP_BY_HOP | {"date", "server", REQUEST_ID_HEADER}


@dataclass(frozen=True)
class Upstream:
    """One server behind the gateway: the model name clients ask for and its root URL."""

    name: str
    root: str  # without the trailing /v1: vLLM serves /tokenize at the server root

    @classmethod
    def parse(cls, name: object, url: object) -> Upstream:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"an upstream's model name must be a non-empty string; got {name!r}.")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"upstream {name!r}: {url!r} is not an http(s) URL; give the server's API root, "
                "e.g. http://127.0.0.1:8001/v1."
            )
        return cls(name, url.rstrip("/").removesuffix("/v1"))

    @property
    def api_root(self) -> str:
        return self.root + "/v1"


class UpstreamError(PacoError, ConnectionError):
    """An upstream that could not be reached or answered badly (HTTP 502), or did not answer
    in time (504); ``status`` and ``code`` are the gateway's answer."""

    def __init__(self, message: str, status: int = 502, code: str = "upstream_unreachable") -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    @classmethod
    def of(cls, upstream: Upstream, err: httpx.TransportError) -> UpstreamError:
        what = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        if isinstance(err, httpx.TimeoutException):
            return cls(
                f"upstream {upstream.name!r} at {upstream.api_root} did not answer in time "
                f"({what}); it may be overloaded or stalled.",
                status=504,
                code="upstream_timeout",
            )
        return cls(
            f"upstream {upstream.name!r} at {upstream.api_root} is unreachable ({what}); is "
            "its server running?",
            status=502,
            code="upstream_unreachable",
        )


class _Relay(StreamingResponse):
    """The upstream's answer, streamed as it arrives; the upstream response is closed
    whatever happens to the client (done, disconnected, failed)."""

    def __init__(self, upstream: Upstream, response: httpx.Response) -> None:
        super().__init__(self._chunks(upstream, response), status_code=response.status_code)
        self.raw_headers = [
            (key, value)
            for key, value in response.headers.raw
            if key.decode("latin-1").lower() not in NOT_RELAYED
        ]
        self.upstream_response = response

    @staticmethod
    async def _chunks(upstream: Upstream, response: httpx.Response):
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        except httpx.TransportError as err:
            # The status is sent already: cut the stream so the client sees it is incomplete.
            logger.warning("upstream %r broke off its answer (%r)", upstream.name, err)
            raise

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.upstream_response.aclose()


class Gateway:
    """The routes of :func:`create_gateway` around one pooled HTTP client."""

    def __init__(self, upstreams: Mapping[str, str], config: GatewayConfig) -> None:
        if not isinstance(upstreams, Mapping) or not upstreams:
            raise ConfigError(
                f"a gateway needs one upstream or more (model name -> URL); got {upstreams!r}."
            )
        self.upstreams = {name: Upstream.parse(name, url) for name, url in upstreams.items()}
        self.config = config
        self.client: httpx.AsyncClient | None = None

    def open(self) -> None:
        timeout = httpx.Timeout(self.config.upstream_timeout, connect=self.config.connect_timeout)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    # ------------------------------------------------------------------ routes
    async def forward(self, request: Request) -> Response:
        """A POST, to the upstream serving its body's ``model``."""
        check_api_key(request, self.config.api_key)
        body = await request.body()
        name = load_json(body).get("model")
        upstream = served_entry(self.upstreams, name, where="gateway")
        headers = [
            (key, value)
            for key, value in request.headers.raw
            if key.decode("latin-1").lower() not in NOT_FORWARDED
        ]
        headers.append((REQUEST_ID_HEADER.encode(), request_id_of(request).encode()))
        # The path as the client sent it (not percent-decoded), and its query.
        url = upstream.root + request.scope.get("raw_path", request.url.path.encode()).decode(
            "latin-1"
        )
        if request.url.query:
            url += "?" + request.url.query
        outgoing = self.client.build_request(request.method, url, content=body, headers=headers)
        try:
            response = await self.client.send(outgoing, stream=True)
        except httpx.TransportError as err:
            raise UpstreamError.of(upstream, err) from None
        return _Relay(upstream, response)

    async def models(self, request: Request) -> Response:
        """The union of the upstreams' entries; any upstream that cannot say fails the list
        (502/504), since a list without it would tell a client its model is not served."""
        check_api_key(request, self.config.api_key)
        headers = {}
        if "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]
        entries = await asyncio.gather(
            *(self._entry(upstream, headers) for upstream in self.upstreams.values())
        )
        return JSONResponse({"object": "list", "data": entries})

    async def _entry(self, upstream: Upstream, headers: dict) -> dict:
        try:
            response = await self.client.get(upstream.api_root + "/models", headers=headers)
        except httpx.TransportError as err:
            raise UpstreamError.of(upstream, err) from None
        try:
            entries = {entry["id"]: entry for entry in response.json()["data"]}
        except (ValueError, KeyError, TypeError):
            entries = None
        if response.status_code != 200 or entries is None:
            raise UpstreamError(
                f"upstream {upstream.name!r} answered /v1/models with HTTP "
                f"{response.status_code}: {response.text[:200]!r}",
                status=502,
                code="upstream_error",
            )
        if upstream.name not in entries:
            raise UpstreamError(
                f"upstream {upstream.name!r} at {upstream.api_root} serves {sorted(entries)}, "
                f"not {upstream.name!r}: start it with that served model name.",
                status=502,
                code="upstream_model_mismatch",
            )
        return entries[upstream.name]

    async def health(self, request: Request) -> Response:
        reports = await asyncio.gather(*(self._health(u) for u in self.upstreams.values()))
        upstreams = dict(zip(self.upstreams, reports))
        healthy = all(report["status"] == "ok" for report in reports)
        status = "ok" if healthy else "unavailable"
        return JSONResponse({"status": status, "upstreams": upstreams}, 200 if healthy else 503)

    async def _health(self, upstream: Upstream) -> dict:
        report: dict = {"url": upstream.api_root}
        try:
            response = await self.client.get(
                upstream.root + "/health", timeout=self.config.health_timeout
            )
        except httpx.TransportError as err:
            error = UpstreamError.of(upstream, err)
            return {**report, "status": "down", "code": error.code, "detail": str(error)}
        report["status"] = "ok" if response.status_code == 200 else "error"
        report["http_status"] = response.status_code
        try:
            report["health"] = response.json()
        except ValueError:  # vLLM's /health has an empty body
            pass
        return report

    async def no_model_to_route_by(self, request: Request) -> Response:
        check_api_key(request, self.config.api_key)
        raise RequestError(
            f"GET {request.url.path}: the gateway routes POST requests by their body's model, "
            "and answers GET only on /health and /v1/models.",
            status=404,
            code="not_found",
        )


def create_gateway(upstreams: Mapping[str, str], config: GatewayConfig | None = None) -> Starlette:
    """Build the gateway app in front of ``upstreams``.

    Args:
        upstreams: served model name -> the API root of the server serving it
            (``http://127.0.0.1:8001/v1``; the root without ``/v1`` works too). The name must
            be the one the upstream serves: requests pass through unchanged. Several names
            may share one URL (``paco-reward serve A B``).
        config: body limit, API key and timeouts (default :class:`GatewayConfig`).

    Raises:
        ConfigError: no upstream, an empty name or a URL that is not http(s).

    Example:
        >>> app = create_gateway({"judge": "http://127.0.0.1:8001/v1"})
        >>> sorted(app.state.gateway.upstreams)
        ['judge']
    """
    config = config or GatewayConfig()
    gateway = Gateway(upstreams, config)

    @asynccontextmanager
    async def lifespan(app: Starlette):
        gateway.open()
        logger.info("gateway to %s", {u.name: u.api_root for u in gateway.upstreams.values()})
        yield
        await gateway.close()

    async def http_error(request: Request, err: HTTPException) -> Response:
        code = HTTPStatus(err.status_code).phrase.lower().replace(" ", "_")
        return error_response(err.status_code, str(err.detail), code)

    app = Starlette(
        routes=[
            Route("/health", gateway.health, methods=["GET"]),
            Route("/v1/models", gateway.models, methods=["GET"]),
            Route("/{path:path}", gateway.forward, methods=["POST"]),
            Route("/{path:path}", gateway.no_model_to_route_by, methods=["GET"]),
        ],
        lifespan=lifespan,
        exception_handlers={
            RequestError: request_error,
            UpstreamError: request_error,
            HTTPException: http_error,
            Exception: internal_error,
        },
    )
    app.state.gateway = gateway
    add_request_middleware(app, config.max_body_bytes, "gateway")
    return app
