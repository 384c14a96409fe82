"""The routes of ``paco-reward serve`` (see :mod:`paco_reward.server.app` for the app).

Each route picks the model its body names (:class:`~paco_reward.server.state.ServerState`),
reads the body through :func:`~paco_reward.server.schemas.parse_body` into a pydantic model,
checks the server's limits, and hands the pairs to that model's micro-batcher.
"""

from __future__ import annotations

import math
import time
import uuid

import numpy as np
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from paco_reward.server.schemas import ChatCompletionRequest, ScoreRequest, parse_body
from paco_reward.server.state import ServerState
from paco_reward.templates import get_template, render_instruction

__all__ = ["router"]

router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.paco


# ---------------------------------------------------------------------- routes
@router.get("/health")
async def health(request: Request) -> dict:
    models = _state(request).models
    return {"status": "ok", "models": {name: served.health() for name, served in models.items()}}


@router.get("/v1/models")
async def models(request: Request) -> dict:
    state = _state(request)
    state.authorize(request)
    return {"object": "list", "data": [m.entry(state.config) for m in state.models.values()]}


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> dict:
    state = _state(request)
    served, raw = await state.read(request)
    config, backend, tokenizer = state.config, served.backend, served.backend.tokenizer
    limits = {
        "max_new_tokens": config.max_new_tokens,
        "max_top_logprobs": config.max_top_logprobs,
        "vocab_size": len(tokenizer),
    }
    body = parse_body(raw, ChatCompletionRequest, limits)
    state.check_instruction(body.instruction, "messages[0] text")
    images = await run_in_threadpool(
        state.decode_images, served, body.image_urls, "messages[0].image_url"
    )
    pair = [(0, 1, body.instruction)]
    token_ids = body.logprob_token_ids
    first = None
    if body.logprobs or body.num_tokens == 1:
        (first,) = await served.batcher.first_token(
            images, pair, top_k=body.top_k, token_ids=token_ids
        )
    if body.num_tokens == 1:
        content = tokenizer.decode([first.greedy_id], skip_special_tokens=True)
        eos = backend.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos])
        finish = "stop" if first.greedy_id in eos else "length"
    else:
        content = await served.batcher.call(
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
        "model": served.name,
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
    served, raw = await state.read(request)
    body = parse_body(raw, ScoreRequest)
    state.check_count("images", len(body.images), config.max_images)
    state.check_count("pairs", len(body.pairs), config.max_pairs)
    template = get_template(body.template or "consistency")
    pairs = []
    for k, pair in enumerate(body.pairs):
        instruction = render_instruction(template, pair[2] if len(pair) == 3 else None)
        state.check_instruction(instruction, f"pairs[{k}] instruction")
        pairs.append((pair[0], pair[1], instruction))
    images = await run_in_threadpool(state.decode_images, served, body.images, "images")
    requests = pairs + [(b, a, t) for a, b, t in pairs] if body.symmetric else pairs
    scores = await served.batcher.score(images, requests)
    if body.symmetric:
        scores = (scores[: len(pairs)] + scores[len(pairs) :]) / 2.0
    return {
        "object": "paco.score",
        "model": served.name,
        "template": template.name,
        "template_text": template.text,
        "symmetric": body.symmetric,
        "scores": [float(v) if math.isfinite(v) else None for v in np.asarray(scores, np.float64)],
    }
