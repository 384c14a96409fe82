"""The FastAPI app of ``paco-reward serve``: OpenAI-compatible chat completions plus a native
batch scoring route, in front of one or several in-process evaluators
(:meth:`TransformersBackend.from_pretrained <paco_reward.transformers_backend.TransformersBackend.from_pretrained>`:
a Qwen-VL family's ``LocalBackend`` or another family's ``ProcessorBackend``), each
micro-batched on its own; a request's ``model`` picks one.

Routes:

* ``GET /health``: liveness, and each model's queue depth and batching statistics (no key
  needed);
* ``GET /v1/models``: the served models, each with a ``paco`` entry advertising its yes/no
  token ids and image pixel budget (the remote client uses both);
* ``POST /v1/chat/completions``: OpenAI schema for one pair (one user message: two
  ``image_url`` parts, then the instruction). ``max_tokens=1`` with ``logprobs``/
  ``top_logprobs`` (and the vLLM extension ``logprob_token_ids``) is micro-batched; longer
  ``max_tokens`` generate greedily (``temperature`` and other sampling fields are ignored:
  a judgement is deterministic);
* ``POST /v1/score``: ``{"model", "images": [data URLs], "pairs": [[i, j, prompt], ...],
  "template", "symmetric"}`` → ``{"scores", "model", "template", ...}``.

Errors use OpenAI's body ``{"error": {"message", "type", "code"}}``; a bad request never
stops the server, and a ``model`` it does not serve is a 404 listing the served names. Every
response carries an ``X-Request-ID``; an internal error is logged with it and answered
without its text. The routes live in :mod:`paco_reward.server.routes`, the served models in
:mod:`paco_reward.server.state`, the request bodies in :mod:`paco_reward.server.schemas`.

    >>> app = create_app(TransformersBackend.from_pretrained("model/"), ServerConfig("tiny"))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from paco_reward.errors import ConfigError, PacoError, ServerOverloadedError
from paco_reward.server.common import (
    add_request_middleware,
    error_response,
    internal_error,
    request_error,
)
from paco_reward.server.config import ServerConfig
from paco_reward.server.decode import RequestError
from paco_reward.server.routes import router
from paco_reward.server.state import ServerState

logger = logging.getLogger(__name__)


def create_app(backends, config: ServerConfig) -> FastAPI:
    """Build the server app around one in-process backend, or several behind one port.

    Args:
        backends: an in-process backend (``LocalBackend``, ``ProcessorBackend``; its
            ``batch_size`` is the forward-pass chunk; set it to ``config.max_batch_size`` for one pass per
            batch), or a mapping of served names to backends: each model gets its own
            micro-batcher, and a request's ``model`` picks one.
        config: limits, batching and the optional API key, which hold for every model
            (``max_queue`` per model). ``served_model_name`` names a single backend (None:
            the backend's name); with a mapping it must be None.

    Raises:
        ConfigError: no backend, or a mapping together with ``config.served_model_name``.

    Example:
        >>> app = create_app({"judge": judge, "critic": critic}, ServerConfig())  # doctest: +SKIP
    """
    if isinstance(backends, Mapping):
        if config.served_model_name is not None:
            raise ConfigError(
                f"served_model_name={config.served_model_name!r} names one backend; with a "
                f"mapping of backends the names are its keys ({list(backends)}): leave it None."
            )
        if not backends or not all(isinstance(n, str) and n.strip() for n in backends):
            raise ConfigError(
                f"backends must map non-empty model names to backends; got names {list(backends)}."
            )
    else:
        backends = {config.served_model_name or backends.name: backends}
    state = ServerState.build(backends, config)
    names = sorted(state.models)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for served in state.models.values():
            await served.batcher.start()
        logger.info("serving %s (max batch %d per model)", names, config.max_batch_size)
        yield
        for served in state.models.values():
            await served.batcher.stop()

    app = FastAPI(title="paco-reward", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.paco = state
    add_request_middleware(app, config.max_body_bytes, "server")
    # A client sees what was wrong with its request; an internal failure is logged with
    # the request id and answered without its text.
    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(Exception, internal_error)

    @app.exception_handler(PacoError)
    async def _paco_error(request: Request, err: PacoError) -> JSONResponse:
        return error_response(400, str(err), type(err).__name__)

    @app.exception_handler(ServerOverloadedError)
    async def _overloaded(request: Request, err: ServerOverloadedError) -> JSONResponse:
        return error_response(
            503, f"server overloaded: {err}", "overloaded", headers={"Retry-After": "1"}
        )

    app.include_router(router)
    return app
