"""RemoteBackend policy: LRU cache, NaN (never 0.0) when yes/no are missing from the top-k,
retries with back-off on 429/5xx/connection errors, no retry on 4xx.

Protocol edge cases a real model never produces (HTTP 429/500, a top-k without any yes/no
token, a malformed body) come from ``FlakyOpenAIServer``, a scripted fake server used only here.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from paco_reward import PacoReward, RewardServerError
from paco_reward.images import resize_for_model
from paco_reward.server import ServerThread, free_port
from paco_reward.yes_no import yes_probability_from_logprobs

MODEL_NAME = "tiny-paco"  # served by the live_server fixture (tests/server/conftest.py)


FAST = {"backoff": 0.01, "max_backoff": 0.05, "seed": 0}


# The fake server's tokenizer: "Yes" and "No" are single tokens, every other variant is not.
FAKE_VOCAB = {"Yes": [1], "No": [2]}


class FlakyOpenAIServer:
    """A fake OpenAI-compatible server: answers chat requests from a script of
    ``(status, body)`` steps (the last step repeats) and counts the requests it got. Like
    vLLM it serves ``/tokenize`` and ``/detokenize`` at its root (unless ``tokenize=False``)."""

    def __init__(self, script: list[tuple[int, dict]], tokenize: bool = True) -> None:
        self.script = script
        self.calls = 0
        self.last_request: dict = {}
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": "flaky", "object": "model"}]}

        if tokenize:

            @app.post("/tokenize")
            async def tokenize_(request: Request) -> dict:
                text = (await request.json())["prompt"]
                return {"tokens": FAKE_VOCAB.get(text, [9, 9]), "count": 1}

            @app.post("/detokenize")
            async def detokenize_(request: Request) -> dict:
                ids = (await request.json())["tokens"]
                words = {tuple(v): k for k, v in FAKE_VOCAB.items()}
                return {"prompt": words.get(tuple(ids), "??")}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> JSONResponse:
            self.last_request = await request.json()
            status, body = self.script[min(self.calls, len(self.script) - 1)]
            self.calls += 1
            return JSONResponse(
                body, status, headers={"Retry-After": "0"} if status == 429 else None
            )

        self.thread = ServerThread(app)

    def __enter__(self) -> FlakyOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.thread.stop()


def completion(top: dict[str, float]) -> dict:
    token = max(top, key=top.get)
    entries = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top.items()]
    return {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": token},
                "logprobs": {
                    "content": [{"token": token, "logprob": top[token], "top_logprobs": entries}]
                },
                "finish_reason": "length",
            }
        ],
    }


YES_NO = {"Yes": -0.2, " yes": -3.0, "No": -1.9, "maybe": -4.0}
ERROR = {"error": {"message": "scripted failure"}}


def test_cache_hits_misses_and_lru_eviction(live_server, tiny_reward, random_images):
    rm = PacoReward.from_server(live_server.base_url, MODEL_NAME, cache_size=2)
    a, b, c = random_images(3, seed=7)
    first = rm.score_pairs([(a, b, "x"), (a, c, "x")])
    assert rm.backend.cache_info() == {
        "hits": 0,
        "misses": 2,
        "size": 2,
        "max_size": 2,
        "missing_yes_no": 0,
    }
    sent = rm.backend.requests_sent
    again = rm.score_pairs([(a, b, "x"), (a, c, "x")])
    np.testing.assert_array_equal(first, again)
    assert rm.backend.requests_sent == sent  # served from the cache
    assert rm.backend.cache_info()["hits"] == 2
    rm.score(b, c, "x")  # evicts the least recently used entry (a, b)
    rm.score(a, c, "x")
    assert rm.backend.cache.hits == 3
    rm.score(a, b, "x")
    assert rm.backend.cache.misses == 4
    rm.score(a, b, "another theme")  # the rendered prompt is part of the key
    assert rm.backend.cache.misses == 5
    np.testing.assert_allclose(
        first, tiny_reward.score_pairs([(a, b, "x"), (a, c, "x")]), atol=1e-4
    )
    no_cache = PacoReward.from_server(live_server.base_url, MODEL_NAME, cache_size=0)
    no_cache.score(a, b, "x")
    no_cache.score(a, b, "x")
    assert no_cache.backend.cache_info()["size"] == 0 and no_cache.backend.requests_sent == 3
    # a pair repeated within one call is requested once
    repeated = no_cache.score_pairs([(a, c, "x"), (b, c, "x"), (a, c, "x")])
    assert no_cache.backend.requests_sent == 5 and repeated[0] == repeated[2]


def test_top_k_without_yes_no_is_nan_with_warning(live_server, tiny_reward, random_images, caplog):
    """Our server with exact probabilities switched off behaves like a plain top-k server:
    a pair scores NaN exactly when no yes/no variant is in its top-k, else the truncated score."""
    import torch

    top_k = 3
    rm = PacoReward.from_server(
        live_server.base_url, MODEL_NAME, exact_yes_no=False, top_logprobs=top_k
    )
    images = random_images(12, seed=8)
    pairs = [(images[i], images[i + 1], "a fox") for i in range(0, 12, 2)]
    with caplog.at_level(logging.WARNING, logger="paco_reward.remote_backend"):
        scores = rm.score_pairs(pairs)
    backend = tiny_reward.backend
    expected = []
    for a, b, theme in pairs:
        table = [resize_for_model(x, backend.image_policy) for x in (a, b)]
        instruction = tiny_reward._instruction(theme, None)
        embeddings, grids = backend.encode_images(table)
        row = torch.log_softmax(
            backend.first_token_logits([(0, 1, instruction)], embeddings, grids)[0].float(), -1
        )
        values, ids = row.topk(top_k)
        top = {backend.tokenizer.decode([i]): v for i, v in zip(ids.tolist(), values.tolist())}
        expected.append(yes_probability_from_logprobs(top))
    missing = sum(math.isnan(e) for e in expected)
    assert missing >= 1, "the test needs at least one pair without yes/no in its top-k"
    np.testing.assert_allclose(scores, expected, atol=1e-4)  # NaN where expected is NaN
    assert not np.any(scores == 0.0)
    assert rm.backend.missing_yes_no == missing
    assert sum("no yes/no token" in r.getMessage() for r in caplog.records) == missing
    # NaN scores are not cached: asking again asks the server again.
    sent = rm.backend.requests_sent
    rm.score_pairs(pairs)
    assert rm.backend.requests_sent == sent + missing


def test_fake_server_without_yes_no_gives_nan(caplog):
    """Opting into top-k (exact_yes_no=False): a top-k without yes/no scores NaN."""
    with FlakyOpenAIServer([(200, completion({"maybe": -0.1, "perhaps": -2.0}))]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", exact_yes_no=False, **FAST)
        with caplog.at_level(logging.WARNING):
            score = rm.backend.score_batch([_img(0), _img(1)], [(0, 1, "x")])
        assert math.isnan(score[0]) and rm.backend.missing_yes_no == 1
        assert "missing_yes_no=1" in caplog.text
        assert "logprob_token_ids" not in fake.last_request


def test_yes_no_ids_from_the_servers_tokenize():
    """A server that neither advertises ids nor gets a tokenizer: the ids come from its
    /tokenize (vLLM's), and every request asks for exactly those."""
    with FlakyOpenAIServer([(200, completion(YES_NO))]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", **FAST)
        assert rm.backend.yes_no_token_ids == [1, 2]
        score = rm.backend.score_batch([_img(0), _img(1)], [(0, 1, "x")])
        assert fake.last_request["logprob_token_ids"] == [1, 2]
        assert score[0] == pytest.approx(yes_probability_from_logprobs(YES_NO))


def test_server_ignoring_logprob_token_ids_raises():
    """A server that accepts the field but answers with its top-k (HTTP 200) is caught: the
    requested tokens did not all come back, so the score would be truncated."""
    from paco_reward.errors import LogprobTokenIdsIgnoredError

    with FlakyOpenAIServer([(200, completion({"maybe": -0.1, "Yes": -2.0}))]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", **FAST)
        with pytest.raises(LogprobTokenIdsIgnoredError, match="2 yes/no tokens were requested, 1"):
            rm.score(_img(0), _img(1), "x")
        assert rm.backend.cache_info()["size"] == 0


def test_no_way_to_find_yes_no_ids_raises_at_construction():
    with FlakyOpenAIServer([(200, completion(YES_NO))], tokenize=False) as fake:
        with pytest.raises(RewardServerError, match="Cannot find the yes/no token ids"):
            PacoReward.from_server(fake.thread.base_url, "flaky", **FAST)
        # with the ids given, it scores exactly
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", yes_no_token_ids=[1, 2], **FAST)
        assert rm.score(_img(0), _img(1), "x") == pytest.approx(
            yes_probability_from_logprobs(YES_NO)
        )


def _img(seed: int):
    from PIL import Image

    return Image.fromarray(
        np.random.default_rng(seed).integers(0, 256, (28, 28, 3), dtype=np.uint8)
    )


def test_retries_429_and_5xx_with_backoff_then_succeeds():
    script = [(429, ERROR), (500, ERROR), (503, ERROR), (200, completion(YES_NO))]
    with FlakyOpenAIServer(script) as fake:
        backend = PacoReward.from_server(fake.thread.base_url, "flaky", retries=3, **FAST).backend
        score = backend.score_batch([_img(0), _img(1)], [(0, 1, "x")])
        assert fake.calls == 4 and backend.retries_done == 3
        assert score[0] == pytest.approx(yes_probability_from_logprobs(YES_NO))


def test_retries_exhausted_raise_and_never_fabricate_a_score():
    with FlakyOpenAIServer([(503, ERROR)]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", retries=2, **FAST)
        with pytest.raises(
            RewardServerError, match=r"model 'flaky'\) failed pair 0 after 3 attempts: HTTP 503"
        ):
            rm.score(_img(0), _img(1), "x")
        assert fake.calls == 3


@pytest.mark.parametrize("status", [400, 422])
def test_4xx_is_not_retried(status):
    with FlakyOpenAIServer([(status, {"error": {"message": "bad image"}})]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", retries=5, **FAST)
        with pytest.raises(RewardServerError, match=f"HTTP {status}: bad image"):
            rm.score(_img(0), _img(1), "x")
        assert fake.calls == 1


def test_malformed_response_raises():
    with FlakyOpenAIServer([(200, {"choices": [{"message": {"content": "Yes"}}]})]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", **FAST)
        with pytest.raises(RewardServerError, match="returned no first-token logprobs"):
            rm.score(_img(0), _img(1), "x")


def test_unreachable_server_raises_after_retries():
    port = free_port()
    with pytest.raises(RewardServerError, match=r"failed /models after 3 attempts: ConnectError"):
        PacoReward.from_server(f"http://127.0.0.1:{port}/v1", "m", retries=2, **FAST)


def test_async_path_retries_too():
    import asyncio

    with FlakyOpenAIServer([(500, ERROR), (200, completion(YES_NO))]) as fake:
        rm = PacoReward.from_server(fake.thread.base_url, "flaky", retries=2, **FAST)
        scores = asyncio.run(rm.ascore_pairs([(_img(0), _img(1), "x"), (_img(2), _img(3), "y")]))
        assert np.all(scores == pytest.approx(yes_probability_from_logprobs(YES_NO)))
        assert rm.backend.retries_done == 1


def test_yes_no_ids_from_a_tokenizer_folder(
    live_server, tiny_model_dir, tiny_reward, random_images
):
    """For vLLM (which does not advertise ids) the client resolves them from the tokenizer."""
    rm = PacoReward.from_server(live_server.base_url, MODEL_NAME, tokenizer=tiny_model_dir)
    advertised = PacoReward.from_server(live_server.base_url, MODEL_NAME)
    assert rm.backend.yes_no_token_ids == advertised.backend.yes_no_token_ids
    assert len(rm.backend.yes_no_token_ids) == 12  # Yes/yes/YES/No/no/NO, with and without space
    a, b = random_images(2, seed=10)
    assert rm.score(a, b, "x") == pytest.approx(tiny_reward.score(a, b, "x"), abs=1e-4)
