"""The FastAPI app of ``paco-reward serve``: OpenAI-compatible chat completions plus a native
batch scoring route, in front of a micro-batched :class:`~paco_reward.local_backend.LocalBackend`.

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
stops the server.

    >>> app = create_app(LocalBackend.from_pretrained("model/"), ServerConfig("tiny"))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
import math
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import asdict

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from paco_reward.errors import PacoError
from paco_reward.images import resize_for_model
from paco_reward.server.batcher import MicroBatcher, ServerOverloadedError
from paco_reward.server.config import ServerConfig
from paco_reward.server.decode import RequestError, decode_data_url
from paco_reward.templates import get_template, render_instruction
from paco_reward.yes_no import YesNoTokens

logger = logging.getLogger(__name__)


def _error(status: int, message: str, code: str, headers: dict | None = None) -> JSONResponse:
    kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}.get(
        status, "InvalidRequestError" if status < 500 else "ServerError"
    )
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code}}, status, headers=headers
    )


class BodyLimitMiddleware:
    """Pure ASGI middleware: answers 413 once a request body exceeds ``max_bytes`` (by its
    Content-Length, or while streaming), before the app parses anything."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = _error(
            413,
            f"request body exceeds the server's limit of {self.max_bytes} bytes",
            "body_too_large",
        )
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await too_large(scope, receive, send)
            return
        chunks, total, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await too_large(scope, receive, send)
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


def _finite_or_none(values) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def create_app(backend, config: ServerConfig) -> FastAPI:
    """Build the server app around an in-process backend.

    Args:
        backend: a :class:`~paco_reward.local_backend.LocalBackend` (its ``batch_size`` is the
            forward-pass chunk; set it to ``config.max_batch_size`` for one pass per batch).
        config: limits, batching and the optional API key (``served_model_name=None``: the
            backend's name).
    """
    if config.served_model_name is None:
        config = dataclasses.replace(config, served_model_name=backend.name)
    batcher = MicroBatcher(
        backend,
        max_batch_size=config.max_batch_size,
        max_wait_ms=config.max_wait_ms,
        max_queue=config.max_queue,
    )
    tokenizer = backend.tokenizer
    vocab_size = len(tokenizer)
    created = int(time.time())
    exact = YesNoTokens.from_tokenizer(tokenizer, canonical=False)
    canonical = YesNoTokens.from_tokenizer(tokenizer, canonical=True)
    token_text: dict[int, str] = {}

    def text_of(token_id: int) -> str:
        if token_id not in token_text:
            token_text[token_id] = tokenizer.decode([token_id])
        return token_text[token_id]

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        logger.info("serving %r (max batch %d)", config.served_model_name, config.max_batch_size)
        yield
        await batcher.stop()

    app = FastAPI(title="paco-reward", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.batcher = batcher
    app.state.config = config
    app.add_middleware(BodyLimitMiddleware, max_bytes=config.max_body_bytes)

    # ------------------------------------------------------------------ errors
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
        logger.exception("internal error on %s", request.url.path)
        return _error(500, f"internal server error: {type(err).__name__}: {err}", "internal_error")

    # ------------------------------------------------------------------ helpers
    def authorize(request: Request) -> None:
        if config.api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), config.api_key.encode()
        )
        if not ok:
            raise RequestError(
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                status=401,
                code="invalid_api_key",
            )

    async def read_json(request: Request) -> dict:
        authorize(request)
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as err:
            raise RequestError(f"request body is not valid JSON ({err}).") from None
        if not isinstance(body, dict):
            raise RequestError(f"request body must be a JSON object; got {type(body).__name__}.")
        model = body.get("model")
        if model != config.served_model_name:
            raise RequestError(
                f"The model `{model}` does not exist. This server serves "
                f"{config.served_model_name!r} (see /v1/models).",
                status=404,
                code="model_not_found",
            )
        return body

    def decode_images(urls: list, where: str) -> list:
        images = []
        for k, url in enumerate(urls):
            image = decode_data_url(
                url, f"{where}[{k}]", config.max_image_bytes, config.max_image_pixels
            )
            images.append(resize_for_model(image, backend.image_policy, f"{where}[{k}]"))
        return images

    def int_field(body: dict, name: str, default: int, low: int, high: int) -> int:
        value = body.get(name, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise RequestError(f"'{name}' must be an integer in [{low}, {high}]; got {value!r}.")
        return value

    def check_instruction(text: str, where: str) -> None:
        if len(text) > config.max_instruction_chars:
            raise RequestError(
                f"{where} is {len(text)} characters, above the server's limit of "
                f"{config.max_instruction_chars}.",
                status=413,
                code="instruction_too_long",
            )

    def parse_chat(body: dict) -> tuple[list, str]:
        messages = body.get("messages")
        if (
            not isinstance(messages, list)
            or len(messages) != 1
            or not isinstance(messages[0], dict)
            or messages[0].get("role") != "user"
            or not isinstance(messages[0].get("content"), list)
        ):
            raise RequestError(
                "'messages' must hold exactly one user message whose content is a list: two "
                "image_url parts, then the instruction text (as paco_reward.build_messages)."
            )
        urls, texts = [], []
        for k, part in enumerate(messages[0]["content"]):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                if texts:
                    raise RequestError("put both images before the instruction text.")
                image_url = part.get("image_url")
                urls.append(image_url.get("url") if isinstance(image_url, dict) else image_url)
            elif kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise RequestError(
                    f"messages[0].content[{k}]: expected an 'image_url' or 'text' part; "
                    f"got {str(part)[:80]!r}."
                )
        if len(urls) != 2:
            raise RequestError(
                f"a PaCo evaluator compares exactly 2 images per request; got {len(urls)} "
                "(too many or too few images). Use /v1/score for many pairs."
            )
        if not texts or not "".join(texts).strip():
            raise RequestError("the user message needs the instruction text after the images.")
        instruction = "\n".join(texts)
        check_instruction(instruction, "messages[0] text")
        return urls, instruction

    # ------------------------------------------------------------------ routes
    @app.get("/health")
    async def health() -> dict:
        return {
            "status": "ok",
            "model": config.served_model_name,
            "queued_pairs": batcher.queued_pairs,
            "batching": batcher.stats.as_dict(),
        }

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        authorize(request)
        entry = {
            "id": config.served_model_name,
            "object": "model",
            "created": created,
            "owned_by": "paco-rl",
            "paco": {
                "yes_no_token_ids": {
                    "canonical": [*canonical.yes, *canonical.no],
                    "exact": [*exact.yes, *exact.no],
                },
                "image_policy": asdict(backend.image_policy),
                "max_batch_size": config.max_batch_size,
            },
        }
        return {"object": "list", "data": [entry]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> dict:
        body = await read_json(request)
        if body.get("stream"):
            raise RequestError("streaming is not supported; send stream=false.")
        if (body.get("n") or 1) != 1:
            raise RequestError(f"only n=1 is supported; got n={body.get('n')!r}.")
        max_key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        max_tokens = int_field(
            body, max_key, min(256, config.max_new_tokens), 1, config.max_new_tokens
        )
        top_k = int_field(body, "top_logprobs", 0, 0, config.max_top_logprobs)
        want_logprobs = bool(body.get("logprobs", False))
        token_ids = body.get("logprob_token_ids") or []
        if (
            not isinstance(token_ids, list)
            or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size
                for t in token_ids
            )
            or len(token_ids) > 256
        ):
            raise RequestError(
                f"'logprob_token_ids' must be a list of at most 256 token ids in [0, {vocab_size})."
            )
        urls, instruction = parse_chat(body)
        images = await run_in_threadpool(decode_images, urls, "messages[0].image_url")
        pair = [(0, 1, instruction)]
        first = None
        if want_logprobs or max_tokens == 1:
            (first,) = await batcher.first_token(images, pair, top_k=top_k, token_ids=token_ids)
        if max_tokens == 1:
            content = tokenizer.decode([first.greedy_id], skip_special_tokens=True)
            eos = backend.model.generation_config.eos_token_id
            eos = set(eos if isinstance(eos, list) else [eos])
            finish = "stop" if first.greedy_id in eos else "length"
        else:
            content = await batcher.call(
                backend.generate, images, instruction, max_new_tokens=max_tokens
            )
            finish = "stop"
        logprobs = None
        if want_logprobs:
            shown = first.requested if token_ids else first.top

            def entry(token_id: int, logprob: float) -> dict:
                text = text_of(token_id)
                # JSON has no -inf; -9999.0 is what vLLM sends for an impossible token.
                logprob = max(logprob, -9999.0)
                return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

            logprobs = {
                "content": [
                    {
                        **entry(first.greedy_id, first.greedy_logprob),
                        "top_logprobs": [entry(t, lp) for t, lp in shown],
                    }
                ]
            }
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": config.served_model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "logprobs": logprobs,
                    "finish_reason": finish,
                }
            ],
        }

    @app.post("/v1/score")
    async def score(request: Request) -> dict:
        body = await read_json(request)
        urls, raw_pairs = body.get("images"), body.get("pairs")
        if not isinstance(urls, list) or not urls:
            raise RequestError("'images' must be a non-empty list of base64 data URLs.")
        if len(urls) > config.max_images:
            raise RequestError(
                f"too many images: {len(urls)} > the server's limit of {config.max_images}; "
                "split the request.",
                status=413,
                code="too_many_images",
            )
        if not isinstance(raw_pairs, list) or not raw_pairs:
            raise RequestError("'pairs' must be a non-empty list of [i, j] or [i, j, prompt].")
        if len(raw_pairs) > config.max_pairs:
            raise RequestError(
                f"too many pairs: {len(raw_pairs)} > the server's limit of {config.max_pairs}; "
                "split the request.",
                status=413,
                code="too_many_pairs",
            )
        template_name = body.get("template") or "consistency"
        if not isinstance(template_name, str):
            raise RequestError(
                f"'template' must be a name or format string; got {template_name!r}."
            )
        template = get_template(template_name)
        symmetric = bool(body.get("symmetric", False))
        pairs = []
        for k, pair in enumerate(raw_pairs):
            ok = isinstance(pair, list) and len(pair) in (2, 3)
            ok = ok and all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(urls)
                for i in pair[:2]
            )
            if not ok or (len(pair) == 3 and not isinstance(pair[2], (str, type(None)))):
                raise RequestError(
                    f"pairs[{k}] must be [i, j] or [i, j, prompt] with i, j indices into "
                    f"'images' (0..{len(urls) - 1}); got {str(pair)[:80]!r}."
                )
            prompt = pair[2] if len(pair) == 3 else None
            instruction = render_instruction(template, prompt)
            check_instruction(instruction, f"pairs[{k}] instruction")
            pairs.append((pair[0], pair[1], instruction))
        images = await run_in_threadpool(decode_images, urls, "images")
        requests = pairs + [(b, a, t) for a, b, t in pairs] if symmetric else pairs
        scores = await batcher.score(images, requests)
        if symmetric:
            scores = (scores[: len(pairs)] + scores[len(pairs) :]) / 2.0
        return {
            "object": "paco.score",
            "model": config.served_model_name,
            "template": template.name,
            "template_text": template.text,
            "symmetric": symmetric,
            "scores": _finite_or_none(scores),
        }

    return app
