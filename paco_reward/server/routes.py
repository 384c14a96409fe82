"""The routes of ``paco-reward serve`` (see :mod:`paco_reward.server.app` for the app).

Each route reads its body through :func:`~paco_reward.server.schemas.parse_body` into a
pydantic model, checks the server's limits, and hands the pairs to the micro-batcher.
"""

from __future__ import annotations

import hmac
import math
import time
import uuid
from dataclasses import asdict, dataclass

import numpy as np
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from paco_reward.images import resize_for_model
from paco_reward.server.batcher import MicroBatcher
from paco_reward.server.config import ServerConfig
from paco_reward.server.decode import RequestError, decode_data_url
from paco_reward.server.schemas import ChatCompletionRequest, ScoreRequest, load_json, parse_body
from paco_reward.templates import get_template, render_instruction
from paco_reward.yes_no import YesNoTokens

__all__ = ["ServerState", "router"]

router = APIRouter()


@dataclass
class ServerState:
    """What every route needs: the backend, its batcher, the settings and the token ids."""

    backend: object
    batcher: MicroBatcher
    config: ServerConfig
    created: int
    exact: YesNoTokens
    canonical: YesNoTokens

    @classmethod
    def build(cls, backend, config: ServerConfig) -> ServerState:
        batcher = MicroBatcher(
            backend,
            max_batch_size=config.max_batch_size,
            max_wait_ms=config.max_wait_ms,
            max_queue=config.max_queue,
        )
        tokenizer = backend.tokenizer
        return cls(
            backend=backend,
            batcher=batcher,
            config=config,
            created=int(time.time()),
            exact=YesNoTokens.from_tokenizer(tokenizer, canonical=False),
            canonical=YesNoTokens.from_tokenizer(tokenizer, canonical=True),
        )

    # ------------------------------------------------------------------ request helpers
    def authorize(self, request: Request) -> None:
        if self.config.api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.config.api_key.encode()
        )
        if not ok:
            raise RequestError(
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
                status=401,
                code="invalid_api_key",
            )

    async def read(self, request: Request, model, context: dict | None = None):
        """Authorize, check the model name, then parse the body into ``model``."""
        self.authorize(request)
        body = load_json(await request.body())
        if body.get("model") != self.config.served_model_name:
            raise RequestError(
                f"The model `{body.get('model')}` does not exist. This server serves "
                f"{self.config.served_model_name!r} (see /v1/models).",
                status=404,
                code="model_not_found",
            )
        return parse_body(body, model, context)

    def decode_images(self, urls: list, where: str) -> list:
        config = self.config
        images = []
        for k, url in enumerate(urls):
            name = f"{where}[{k}]"
            image = decode_data_url(url, name, config.max_image_bytes, config.max_image_pixels)
            images.append(resize_for_model(image, self.backend.image_policy, name))
        return images

    def check_instruction(self, text: str, where: str) -> None:
        limit = self.config.max_instruction_chars
        if len(text) > limit:
            raise RequestError(
                f"{where} is {len(text)} characters, above the server's limit of {limit}.",
                status=413,
                code="instruction_too_long",
            )

    def check_count(self, what: str, count: int, limit: int) -> None:
        if count > limit:
            raise RequestError(
                f"too many {what}: {count} > the server's limit of {limit}; split the request.",
                status=413,
                code=f"too_many_{what}",
            )


def _state(request: Request) -> ServerState:
    return request.app.state.paco


# ---------------------------------------------------------------------- routes
@router.get("/health")
async def health(request: Request) -> dict:
    state = _state(request)
    return {
        "status": "ok",
        "model": state.config.served_model_name,
        "queued_pairs": state.batcher.queued_pairs,
        "batching": state.batcher.stats.as_dict(),
    }


@router.get("/v1/models")
async def models(request: Request) -> dict:
    state = _state(request)
    state.authorize(request)
    entry = {
        "id": state.config.served_model_name,
        "object": "model",
        "created": state.created,
        "owned_by": "paco-rl",
        "paco": {
            "yes_no_token_ids": {
                "canonical": [*state.canonical.yes, *state.canonical.no],
                "exact": [*state.exact.yes, *state.exact.no],
            },
            # null: the model's processor resizes (Gemma-3, ...); send the images as they are
            "image_policy": asdict(policy) if (policy := state.backend.image_policy) else None,
            "max_batch_size": state.config.max_batch_size,
        },
    }
    return {"object": "list", "data": [entry]}


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> dict:
    state = _state(request)
    config, backend, tokenizer = state.config, state.backend, state.backend.tokenizer
    limits = {
        "max_new_tokens": config.max_new_tokens,
        "max_top_logprobs": config.max_top_logprobs,
        "vocab_size": len(tokenizer),
    }
    body = await state.read(request, ChatCompletionRequest, limits)
    state.check_instruction(body.instruction, "messages[0] text")
    images = await run_in_threadpool(state.decode_images, body.image_urls, "messages[0].image_url")
    pair = [(0, 1, body.instruction)]
    token_ids = body.logprob_token_ids
    first = None
    if body.logprobs or body.num_tokens == 1:
        (first,) = await state.batcher.first_token(
            images, pair, top_k=body.top_k, token_ids=token_ids
        )
    if body.num_tokens == 1:
        content = tokenizer.decode([first.greedy_id], skip_special_tokens=True)
        eos = backend.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos])
        finish = "stop" if first.greedy_id in eos else "length"
    else:
        content = await state.batcher.call(
            backend.generate, images, body.instruction, max_new_tokens=body.num_tokens
        )
        finish = "stop"
    logprobs = None
    if body.logprobs:
        shown = first.requested if token_ids else first.top

        def entry(token_id: int, logprob: float) -> dict:
            text = tokenizer.decode([token_id])
            # JSON has no -inf; -9999.0 is what vLLM sends for an impossible token.
            return {"token": text, "logprob": max(logprob, -9999.0), "bytes": list(text.encode())}

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


@router.post("/v1/score")
async def score(request: Request) -> dict:
    state = _state(request)
    config = state.config
    body = await state.read(request, ScoreRequest)
    state.check_count("images", len(body.images), config.max_images)
    state.check_count("pairs", len(body.pairs), config.max_pairs)
    template = get_template(body.template or "consistency")
    pairs = []
    for k, pair in enumerate(body.pairs):
        instruction = render_instruction(template, pair[2] if len(pair) == 3 else None)
        state.check_instruction(instruction, f"pairs[{k}] instruction")
        pairs.append((pair[0], pair[1], instruction))
    images = await run_in_threadpool(state.decode_images, body.images, "images")
    requests = pairs + [(b, a, t) for a, b, t in pairs] if body.symmetric else pairs
    scores = await state.batcher.score(images, requests)
    if body.symmetric:
        scores = (scores[: len(pairs)] + scores[len(pairs) :]) / 2.0
    return {
        "object": "paco.score",
        "model": config.served_model_name,
        "template": template.name,
        "template_text": template.text,
        "symmetric": body.symmetric,
        "scores": [float(v) if math.isfinite(v) else None for v in np.asarray(scores, np.float64)],
    }
