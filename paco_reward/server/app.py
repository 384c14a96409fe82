"""The FastAPI app of ``paco-reward serve``: OpenAI-compatible chat completions plus a native
batch scoring route, in front of a micro-batched in-process backend
(:meth:`TransformersBackend.from_pretrained <paco_reward.transformers_backend.TransformersBackend.from_pretrained>`:
a Qwen-VL family's ``LocalBackend`` or another family's ``ProcessorBackend``).

Routes:

* ``GET /health``: liveness, queue depth and batching statistics (no key needed);
* ``GET /v1/models``: the one served model, with a ``paco`` entry advertising its yes/no
  token ids and image pixel budget (the remote client uses both);
* ``POST /v1/chat/completions``: OpenAI schema for one pair (one user message: two
  ``image_url`` parts, then the instruction). ``max_tokens=1`` with ``logprobs``/
  ``top_logprobs`` (and the vLLM extension ``logprob_token_ids``) is micro-batched; longer
  ``max_tokens`` generate greedily (``temperature`` and other sampling fields are ignored:
  a judgement is deterministic);
* ``POST /v1/score``: ``{"model", "images": [data URLs], "pairs": [[i, j, prompt], ...],
  "template", "symmetric"}`` → ``{"scores", "model", "template", ...}``.

Errors use OpenAI's body ``{"error": {"message", "type", "code"}}``; a bad request never
stops the server. Every response carries an ``X-Request-ID``; an internal error is logged
with it and answered without its text. The routes live in :mod:`paco_reward.server.routes`,
the request bodies in :mod:`paco_reward.server.schemas`.

    >>> app = create_app(TransformersBackend.from_pretrained("model/"), ServerConfig("tiny"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from paco_reward.errors import PacoError, ServerOverloadedError
from paco_reward.server.config import ServerConfig
from paco_reward.server.decode import RequestError
from paco_reward.server.limits import BodyLimitMiddleware
from paco_reward.server.routes import ServerState, router

logger = logging.getLogger(__name__)


def _error(status: int, message: str, code: str, headers: dict | None = None) -> JSONResponse:
    kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}.get(
        status, "InvalidRequestError" if status < 500 else "ServerError"
    )
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code}}, status, headers=headers
    )


REQUEST_ID_HEADER = "x-request-id"


def request_id_of(request: Request) -> str:
    return request.scope.get("state", {}).get("request_id", "-")


class RequestIdMiddleware:
    """Pure ASGI middleware: gives every request an id (the client's ``X-Request-ID`` when
    it is short and plain, else a new one), kept in ``scope["state"]`` for the logs and
    returned in the response's ``X-Request-ID`` header."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        plain = given and len(given) <= 64 and all(c.isalnum() or c in "-_." for c in given)
        request_id = given if plain else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_id)


def create_app(backend, config: ServerConfig) -> FastAPI:
    """Build the server app around an in-process backend.

    Args:
        backend: an in-process backend (``LocalBackend``, ``ProcessorBackend``; its
            ``batch_size`` is the forward-pass chunk; set it to ``config.max_batch_size`` for
            one pass per batch).
        config: limits, batching and the optional API key (``served_model_name=None``: the
            backend's name).
    """
    if config.served_model_name is None:
        config = dataclasses.replace(config, served_model_name=backend.name)
    state = ServerState.build(backend, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.batcher.start()
        logger.info("serving %r (max batch %d)", config.served_model_name, config.max_batch_size)
        yield
        await state.batcher.stop()

    app = FastAPI(title="paco-reward", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.paco = state
    app.state.batcher = state.batcher
    app.state.config = config
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=config.max_body_bytes,
        too_large=lambda: _error(
            413,
            f"request body exceeds the server's limit of {config.max_body_bytes} bytes",
            "body_too_large",
        ),
    )
    app.add_middleware(RequestIdMiddleware)

    # ------------------------------------------------------------------ errors
    # A client sees what was wrong with its request; an internal failure is logged with
    # the request id and answered without its text (no paths, no exception details).
    @app.exception_handler(RequestError)
    async def _request_error(request: Request, err: RequestError) -> JSONResponse:
        return _error(err.status, str(err), err.code)

    @app.exception_handler(PacoError)
    async def _paco_error(request: Request, err: PacoError) -> JSONResponse:
        return _error(400, str(err), type(err).__name__)

    @app.exception_handler(ServerOverloadedError)
    async def _overloaded(request: Request, err: ServerOverloadedError) -> JSONResponse:
        return _error(503, f"server overloaded: {err}", "overloaded", headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _internal(request: Request, err: Exception) -> JSONResponse:
        request_id = request_id_of(request)
        logger.error(
            "internal error on %s (request %s): %s: %s",
            request.url.path,
            request_id,
            type(err).__name__,
            err,
            exc_info=(type(err), err, err.__traceback__),
        )
        # Starlette answers this outside the middleware stack: add the id header here.
        return _error(
            500,
            f"internal server error (request id {request_id})",
            "internal_error",
            headers={REQUEST_ID_HEADER: request_id},
        )

    app.include_router(router)
    return app
