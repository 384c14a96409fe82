"""Scores served over HTTP equal in-process scores (the real ``openai`` client and our
remote backend), on every PacoReward method, and the native routes answer as documented."""

from __future__ import annotations

import asyncio
import base64
import io

import httpx
import numpy as np
import openai
import pytest
from PIL import Image

from paco_reward import PacoReward, RewardServerError
from paco_reward.images import load_image, resize_for_model
from paco_reward.server import ServerConfig, ServerThread, create_app
from paco_reward.templates import build_messages, render_instruction
from paco_reward.yes_no import YesNoTokens, yes_probability_from_logprobs

MODEL_NAME = "tiny-paco"  # served by the live_server fixture (tests/server/conftest.py)


TOL = 1e-4


def data_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def openai_messages(image_a, image_b, instruction: str) -> list[dict]:
    """build_messages with the image placeholders as OpenAI image_url parts."""
    messages = build_messages(instruction)
    urls = iter([data_url(image_a), data_url(image_b)])
    messages[0]["content"] = [
        {"type": "image_url", "image_url": {"url": next(urls)}} if p["type"] == "image" else p
        for p in messages[0]["content"]
    ]
    return messages


def test_openai_client_scores_equal_in_process(live_server, tiny_reward, random_images):
    images = random_images(6, size=(64, 48), seed=1)
    tokens = YesNoTokens.from_tokenizer(tiny_reward.backend.tokenizer)
    client = openai.OpenAI(base_url=live_server.base_url, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == [MODEL_NAME]
    pairs = [
        (images[0], images[1], "a fox"),
        (images[2], images[3], "a cat"),
        (images[4], images[5], "x"),
    ]
    expected = tiny_reward.score_pairs(pairs)
    got = []
    for a, b, theme in pairs:
        # The client resizes exactly as in-process scoring does, then sends lossless PNG.
        a, b = (resize_for_model(load_image(x), tiny_reward.backend.image_policy) for x in (a, b))
        response = client.chat.completions.create(
            model=MODEL_NAME,
            messages=openai_messages(a, b, render_instruction("consistency", theme)),
            max_tokens=1,
            temperature=0.0,
            logprobs=True,
            top_logprobs=20,
            extra_body={"logprob_token_ids": [*tokens.yes, *tokens.no]},
        )
        first = response.choices[0].logprobs.content[0]
        assert len(first.top_logprobs) == len(tokens.yes) + len(tokens.no)
        got.append(yes_probability_from_logprobs({t.token: t.logprob for t in first.top_logprobs}))
    print("in-process", expected, "over HTTP", got)
    np.testing.assert_allclose(got, expected, atol=TOL)
    assert np.ptp(expected) > 0.01  # the comparison is not between constant scores


def test_openai_client_top_logprobs_match_full_distribution(
    live_server, tiny_reward, random_images
):
    import torch

    a, b = random_images(2, seed=2)
    instruction = render_instruction("consistency", "a fox")
    client = openai.OpenAI(base_url=live_server.base_url, api_key="unused", max_retries=0)
    response = client.chat.completions.create(
        model=MODEL_NAME,
        messages=openai_messages(
            *(resize_for_model(x, tiny_reward.backend.image_policy) for x in (a, b)), instruction
        ),
        max_tokens=1,
        logprobs=True,
        top_logprobs=5,
    )
    backend = tiny_reward.backend
    table_images = [resize_for_model(x, backend.image_policy) for x in (a, b)]
    embeddings, grids = backend.encode_images(table_images)
    logits = backend.first_token_logits([(0, 1, instruction)], embeddings, grids)[0]
    values, ids = torch.log_softmax(logits.float(), -1).topk(5)
    first = response.choices[0].logprobs.content[0]
    assert [t.token for t in first.top_logprobs] == [backend.tokenizer.decode([i]) for i in ids]
    np.testing.assert_allclose([t.logprob for t in first.top_logprobs], values.tolist(), atol=1e-4)
    assert response.choices[0].message.content == first.top_logprobs[0].token
    assert first.token == first.top_logprobs[0].token


def test_from_server_methods_equal_in_process(remote_reward, tiny_reward, random_images):
    imgs = random_images(4, seed=3)
    theme = "a red fox"
    pairs = [
        (imgs[0], imgs[1], theme),
        (imgs[1], imgs[2], "a blue bird"),
        (imgs[2], imgs[3], theme),
    ]
    np.testing.assert_allclose(
        remote_reward.score_pairs(pairs), tiny_reward.score_pairs(pairs), atol=TOL
    )
    theme_free = [(imgs[0], imgs[1]), (imgs[2], imgs[3])]
    np.testing.assert_allclose(
        remote_reward.score_pairs(theme_free, template="rank"),
        tiny_reward.score_pairs(theme_free, template="rank"),
        atol=TOL,
    )
    assert remote_reward.score(imgs[0], imgs[1], theme) == pytest.approx(
        tiny_reward.score(imgs[0], imgs[1], theme), abs=TOL
    )
    for symmetric in (False, True):
        remote_set = remote_reward.score_set(imgs, theme, symmetric=symmetric)
        local_set = tiny_reward.score_set(imgs, theme, symmetric=symmetric)
        np.testing.assert_allclose(remote_set.scores, local_set.scores, atol=TOL)
    remote_rank = remote_reward.rank(imgs[0], imgs[1:])
    local_rank = tiny_reward.rank(imgs[0], imgs[1:])
    assert remote_rank.order == local_rank.order
    remote_edit = remote_reward.score_edit(imgs[0], imgs[1], "make it blue")
    local_edit = tiny_reward.score_edit(imgs[0], imgs[1], "make it blue")
    np.testing.assert_allclose(
        [remote_edit.consistency, remote_edit.prompt_following, remote_edit.overall],
        [local_edit.consistency, local_edit.prompt_following, local_edit.overall],
        atol=TOL,
    )
    grid = Image.new("RGB", (128, 128))
    for k, panel in enumerate(imgs):
        grid.paste(panel, ((k % 2) * 64, (k // 2) * 64))
    np.testing.assert_allclose(
        remote_reward.score_grid(grid, "FOUR-PANEL Images with a 2x2 grid layout. A fox.").scores,
        tiny_reward.score_grid(grid, "FOUR-PANEL Images with a 2x2 grid layout. A fox.").scores,
        atol=TOL,
    )
    scores = asyncio.run(remote_reward.ascore_pairs(pairs[:2], symmetric=True))
    np.testing.assert_allclose(scores, tiny_reward.score_pairs(pairs[:2], symmetric=True), atol=TOL)


def test_explain_over_http_is_the_local_greedy_judgement(remote_reward, tiny_reward, random_images):
    a, b = random_images(2, seed=4)
    remote = remote_reward.explain(a, b, "a fox", max_new_tokens=12)
    local = tiny_reward.explain(a, b, "a fox", max_new_tokens=12)
    assert remote.text == local.text and remote.text
    assert remote.score == pytest.approx(local.score, abs=TOL)


def test_native_score_route(live_server, tiny_reward, random_images):
    imgs = [resize_for_model(x, tiny_reward.backend.image_policy) for x in random_images(3, seed=5)]
    body = {
        "model": MODEL_NAME,
        "images": [data_url(x) for x in imgs],
        "pairs": [[0, 1, "a fox"], [1, 2, "a fox"], [0, 2, "same colours"]],
        "template": "criteria",
    }
    for symmetric in (False, True):
        response = httpx.post(
            live_server.base_url + "/score", json={**body, "symmetric": symmetric}
        )
        assert response.status_code == 200, response.text
        out = response.json()
        assert out["model"] == MODEL_NAME and out["template"] == "criteria"
        assert out["template_text"].startswith("Do images meet the following criteria?")
        expected = tiny_reward.score_pairs(
            [
                (imgs[0], imgs[1], "a fox"),
                (imgs[1], imgs[2], "a fox"),
                (imgs[0], imgs[2], "same colours"),
            ],
            template="criteria",
            symmetric=symmetric,
        )
        np.testing.assert_allclose(out["scores"], expected, atol=TOL)


def test_health_and_models_advertise_yes_no_ids(live_server, tiny_reward):
    health = httpx.get(live_server.base_url.removesuffix("/v1") + "/health").json()
    assert health["status"] == "ok" and list(health["models"]) == [MODEL_NAME]
    assert health["models"][MODEL_NAME]["batching"]["batches"] >= 0
    entry = httpx.get(live_server.base_url + "/models").json()["data"][0]
    tokens = YesNoTokens.from_tokenizer(tiny_reward.backend.tokenizer)
    assert entry["paco"]["yes_no_token_ids"]["canonical"] == [*tokens.yes, *tokens.no]
    assert (
        entry["paco"]["image_policy"]["max_pixels"] == tiny_reward.backend.image_policy.max_pixels
    )


def test_wrong_model_name_fails_fast_and_clearly(live_server):
    import time

    start = time.perf_counter()
    with pytest.raises(
        RewardServerError, match=r"does not serve model 'PaCo-Reward-7b'.*tiny-paco"
    ):
        PacoReward.from_server(live_server.base_url, "PaCo-Reward-7b", retries=5)
    assert time.perf_counter() - start < 5.0  # no retrying a permanent error
    client = openai.OpenAI(base_url=live_server.base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])


def test_a_url_without_v1_and_a_body_without_model_say_what_to_add(live_server):
    """The server's root for its API root was a bare "HTTP 404: Not Found"; a body without
    "model" was "The model `None` does not exist"."""
    root = live_server.base_url.removesuffix("/v1")
    with pytest.raises(RewardServerError, match=r"does not end in /v1; add /v1") as info:
        PacoReward.from_server(root, MODEL_NAME, retries=0)
    assert f"base_url='{root}/v1'" in str(info.value)
    for body in ({}, {"images": [], "pairs": []}):
        response = httpx.post(live_server.base_url + "/score", json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "model_missing"
        assert "no 'model' field" in error["message"] and MODEL_NAME in error["message"]
        assert "None" not in error["message"]
    wrong_type = httpx.post(live_server.base_url + "/score", json={"model": 7})
    assert wrong_type.status_code == 400 and "must be a string" in wrong_type.text


def test_api_key_is_required_when_set(tiny_reward, random_images):
    app = create_app(tiny_reward.backend, ServerConfig("keyed", api_key="s3cret"))
    with ServerThread(app) as server:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            response = httpx.get(server.base_url + "/models", headers=headers)
            assert response.status_code == 401
            assert "API key" in response.json()["error"]["message"]
        assert httpx.get(server.base_url.removesuffix("/v1") + "/health").status_code == 200
        with pytest.raises(RewardServerError, match="api_key"):
            PacoReward.from_server(server.base_url, "keyed", api_key="wrong")
        rm = PacoReward.from_server(server.base_url, "keyed", api_key="s3cret")
        a, b = random_images(2, seed=6)
        assert rm.score(a, b, "x") == pytest.approx(tiny_reward.score(a, b, "x"), abs=TOL)


def test_ascore_pairs_in_process_runs_in_a_thread(tiny_reward, random_images):
    a, b, c = random_images(3, seed=9)
    pairs = [(a, b, "x"), (b, c, "y")]
    np.testing.assert_array_equal(
        asyncio.run(tiny_reward.ascore_pairs(pairs, symmetric=True)),
        tiny_reward.score_pairs(pairs, symmetric=True),
    )


def test_a_qwen3_vl_evaluator_serves_its_budget_and_scores_as_in_process(
    tiny_qwen3_vl_dir, random_images
):
    """The server holds whatever family the folder's config names; its client reads the
    served model's budget (32 x 32 pixels a token for Qwen3-VL) and scores as in-process."""
    local = PacoReward.from_pretrained(tiny_qwen3_vl_dir)
    app = create_app(local.backend, ServerConfig("tiny-qwen3-vl", max_batch_size=8))
    with ServerThread(app) as server:
        remote = PacoReward.from_server(server.base_url, "tiny-qwen3-vl", retries=1, timeout=30.0)
        try:
            assert remote.backend.image_policy == local.backend.image_policy
            assert remote.backend.image_policy.factor == 32
            images = random_images(3, size=(64, 48), seed=4)
            pairs = [(images[0], images[1], "a fox"), (images[1], images[2], "a fox")]
            np.testing.assert_allclose(
                remote.score_pairs(pairs), local.score_pairs(pairs), atol=TOL
            )
        finally:
            remote.backend.close()
