"""``paco-reward gateway``: one port in front of several OpenAI-compatible servers (vLLM,
``paco-reward serve``), each request routed to its server by the ``model`` it names.

Routes:

* ``POST`` to any path (``/v1/chat/completions``, ``/v1/score``, vLLM's ``/tokenize`` and
  ``/detokenize`` at the root, ...): forwarded to the upstream serving the body's ``model``,
  path, query and body unchanged, the headers less those about one connection (RFC 9110
  7.6.1: the hop-by-hop ones and every header the ``Connection`` header names) and less the
  client's ``Authorization`` (see below), plus the request id; the upstream's answer comes
  back as it is sent (status, headers less the same connection headers, body, streamed:
  server-sent events pass one by one);
* ``GET /v1/models``: the upstreams' own entries of the served names, as they give them
  (``root``, ``paco`` and all: the remote client reads both); an upstream that does not
  answer is listed with ``"paco_gateway": {"status": "down", "code": ..., "message": ...}``
  instead of failing the list (a client for another model is not blocked by it); only when
  no upstream answers is the list a 502/504;
* ``GET /health``: 200 when every upstream answers, else 503 (no key needed). Each
  upstream's URL, health and error are shown only to a caller holding the gateway's key
  (or to anyone when the gateway has none); others see up/down counts.

Secrets: the client's ``Authorization`` header is the *gateway's* key and is not passed on
(``forward_authorization=True`` passes it, for upstreams started with the same key). An
upstream with a key of its own is given it (``Upstream(..., api_key=...)``; on the command
line ``NAME=URL,key_env=VARIABLE`` reads it from the environment), sent as
``Authorization: Bearer <key>`` to that upstream only. The upstream connection pool is
bounded (``max_upstream_connections``); a request that waits past ``connect_timeout`` for
a free connection is a 503 ``gateway_busy`` (the remote client retries it).

Errors use OpenAI's body, like the server's: an unknown ``model`` is a 404 listing the
served names; an upstream that refuses the connection (or breaks it before answering) is a
502 ``upstream_unreachable``; one that does not answer in time a 504 ``upstream_timeout``.
Both name the upstream, and the remote client retries both. An upstream that breaks off a
streamed answer has its stream cut, never ended as if it were whole. The body limit and the
API key are those of ``paco-reward serve``.

    >>> app = create_gateway({"PaCo-Reward-7B": "http://127.0.0.1:8001/v1",
    ...                       "Gemma-3-4B-IT": "http://127.0.0.1:8002/v1"})   # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from contextlib import asynccontextmanager
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
from paco_reward.server.gateway_config import GatewayConfig, Upstream
from paco_reward.server.schemas import load_json

__all__ = ["Upstream", "create_gateway", "down_entry"]

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


def connection_headers(raw: list[tuple[bytes, bytes]]) -> set[str]:
    """The lower-case names a message's ``Connection`` headers list (RFC 9110 7.6.1: headers
    about this connection only, which a proxy must remove along with ``Connection``).

    Example:
        >>> sorted(connection_headers([(b"Connection", b"keep-alive, X-Secret"), (b"A", b"1")]))
        ['keep-alive', 'x-secret']
    """
    names: set[str] = set()
    for key, value in raw:
        if key.decode("latin-1").lower() == "connection":
            names.update(t.strip().lower() for t in value.decode("latin-1").split(",") if t.strip())
    return names


def without_connection_headers(
    raw: list[tuple[bytes, bytes]], also: frozenset[str] | set[str]
) -> list[tuple[bytes, bytes]]:
    """``raw`` less the hop-by-hop headers, those its ``Connection`` names, and ``also``.

    Example:
        >>> without_connection_headers(
        ...     [(b"Connection", b"x-a"), (b"X-A", b"1"), (b"X-B", b"2"), (b"TE", b"trailers")],
        ...     frozenset())
        [(b'X-B', b'2')]
    """
    drop = HOP_BY_HOP | connection_headers(raw) | set(also)
    return [(k, v) for k, v in raw if k.decode("latin-1").lower() not in drop]


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
        if isinstance(err, httpx.PoolTimeout):
            return cls(
                f"the gateway's connections to its upstreams are all busy (waited for one to "
                f"{upstream.name!r}: {what}); retry later, or raise --max_upstream_connections.",
                status=503,
                code="gateway_busy",
            )
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
        self.raw_headers = without_connection_headers(response.headers.raw, NOT_RELAYED)
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

    def __init__(self, upstreams: Mapping[str, str | Upstream], config: GatewayConfig) -> None:
        if not isinstance(upstreams, Mapping) or not upstreams:
            raise ConfigError(
                f"a gateway needs one upstream or more (model name -> URL); got {upstreams!r}."
            )
        self.upstreams = {name: Upstream.parse(name, url) for name, url in upstreams.items()}
        for name, upstream in self.upstreams.items():
            if upstream.name != name:
                raise ConfigError(f"upstream {upstream.name!r} is given under the name {name!r}.")
        self.config = config
        self.client: httpx.AsyncClient | None = None

    def open(self) -> None:
        timeout = httpx.Timeout(
            self.config.upstream_timeout,
            connect=self.config.connect_timeout,
            pool=self.config.connect_timeout,
        )
        most = self.config.max_upstream_connections
        limits = httpx.Limits(max_connections=most, max_keepalive_connections=min(64, most))
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits)

    def _authorization(self, request: Request, upstream: Upstream) -> list[tuple[bytes, bytes]]:
        """The ``Authorization`` header sent to ``upstream``: its own key; else the client's
        when the gateway forwards it; else none (the client's key is the gateway's)."""
        if upstream.api_key is not None:
            return [(b"authorization", f"Bearer {upstream.api_key}".encode("latin-1"))]
        if self.config.forward_authorization and "authorization" in request.headers:
            return [(b"authorization", request.headers["authorization"].encode("latin-1"))]
        return []

    def holds_key(self, request: Request) -> bool:
        """Whether the caller may see the upstreams' details (URLs, errors): it sends the
        gateway's key, or the gateway has none."""
        try:
            check_api_key(request, self.config.api_key)
        except RequestError:
            return False
        return True

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
        headers = without_connection_headers(request.headers.raw, NOT_FORWARDED | {"authorization"})
        headers += self._authorization(request, upstream)
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
        """The upstreams' entries, in the order given; an upstream that cannot say is listed
        marked down (``paco_gateway``) so the others stay usable. When none answers, its
        error (502/504): a list with nothing usable would be no answer."""
        check_api_key(request, self.config.api_key)
        results = await asyncio.gather(
            *(self._entry(request, upstream) for upstream in self.upstreams.values()),
            return_exceptions=True,
        )
        entries = []
        for upstream, result in zip(self.upstreams.values(), results):
            if isinstance(result, UpstreamError):
                logger.warning("gateway: %s", result)
                entries.append(down_entry(upstream.name, result))
            elif isinstance(result, BaseException):
                raise result
            else:
                entries.append(result)
        failures = [r for r in results if isinstance(r, UpstreamError)]
        if len(failures) == len(results):
            raise failures[0]
        return JSONResponse({"object": "list", "data": entries})

    async def _entry(self, request: Request, upstream: Upstream) -> dict:
        headers = dict((k.decode(), v.decode()) for k, v in self._authorization(request, upstream))
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
        up = sum(report["status"] == "ok" for report in reports)
        healthy = up == len(reports)
        body: dict = {"status": "ok" if healthy else "unavailable"}
        if self.holds_key(request):
            body["upstreams"] = dict(zip(self.upstreams, reports))
        else:  # up/down only: the upstreams' names, URLs and errors are for key holders
            body.update(upstreams_up=up, upstreams_down=len(reports) - up)
        return JSONResponse(body, 200 if healthy else 503)

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


def down_entry(name: str, error: UpstreamError) -> dict:
    """The ``/v1/models`` entry of an upstream that did not answer: its name, marked down
    with the gateway's error code and message (a client for it says why it cannot score).

    Example:
        >>> down_entry("d", UpstreamError("upstream 'd' is unreachable"))["paco_gateway"]["code"]
        'upstream_unreachable'
    """
    return {
        "id": name,
        "object": "model",
        "owned_by": "paco-reward-gateway",
        "paco_gateway": {"status": "down", "code": error.code, "message": str(error)},
    }


def create_gateway(
    upstreams: Mapping[str, str | Upstream], config: GatewayConfig | None = None
) -> Starlette:
    """Build the gateway app in front of ``upstreams``.

    Args:
        upstreams: served model name -> the API root of the server serving it
            (``http://127.0.0.1:8001/v1``; the root without ``/v1`` works too), or an
            :class:`Upstream` (with the upstream's own ``api_key``). The name must be the one
            the upstream serves: requests pass through unchanged. Several names may share
            one URL (``paco-reward serve A B``).
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
