"""A judge of another family behind ``paco-reward serve``: the real command serving a tiny
Gemma-3, scored through ``PacoReward.from_server`` with nothing but its URL and name, equal to
the in-process scores; the client sends the images as they are, since the served model
resizes them itself (it advertises no pixel budget)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from paco_reward import PacoReward
from paco_reward.images import ImagePolicy
from paco_reward.server import ServerProcess
from paco_reward.yes_no import YesNoTokens

NAME = "Gemma-3-4B-IT"  # the name the PaCo-GRPO guide serves it under
THEME = "a red fox in four seasons"
# The server's log-probabilities are float32 log-softmax values (about 1e-6 of rounding at
# the magnitudes a random model gives) and it batches the pairs its own way: 1e-5 covers both.
SERVED = 1e-5


def every_method(rm: PacoReward, images) -> dict[str, np.ndarray]:
    a, b, c, d = images
    pairs = [(a, b, THEME), (b, c, THEME), (c, d, "a blue bird"), (d, a, "a cat")]
    return {
        "score_pairs": rm.score_pairs(pairs),
        "symmetric": rm.score_pairs(pairs, symmetric=True),
        "score_set": rm.score_set([a, b, c], THEME).scores,
        "rank": rm.rank(a, [b, c, d]).scores,
    }


@pytest.mark.slow
def test_paco_reward_serve_a_gemma3_judge(tiny_gemma3_dir, random_images):
    images = [
        *random_images(1, size=(64, 64), seed=1),
        *random_images(1, size=(300, 120), seed=2),  # larger than the model's 64 x 64 square
        *random_images(1, size=(45, 97), seed=3),
        *random_images(1, size=(150, 150), seed=4),
    ]
    local = PacoReward.from_pretrained(tiny_gemma3_dir)
    expected = every_method(local, images)
    with ServerProcess(tiny_gemma3_dir, args=["--served_model_name", NAME]) as server:
        entry = httpx.get(f"{server.base_url}/models").json()["data"][0]
        assert entry["id"] == NAME and entry["paco"]["image_policy"] is None

        rm = PacoReward.from_server(server.base_url, model=NAME)
        assert rm.backend.image_policy is None
        tokens = YesNoTokens.from_tokenizer(local.backend.tokenizer)
        assert rm.backend.yes_no_token_ids == [*tokens.yes, *tokens.no]
        served = every_method(rm, images)
        for name, values in expected.items():
            np.testing.assert_allclose(served[name], values, rtol=0, atol=SERVED, err_msg=name)
        spread = np.ptp(np.concatenate(list(expected.values())))
        assert spread > 0.05, "scores barely differ; the comparison would prove little"
        ours = rm.explain(images[0], images[1], THEME, max_new_tokens=6)
        assert ours.text == local.explain(images[0], images[1], THEME, max_new_tokens=6).text

        # The control: resized Qwen-style on the client first, the processor sees other
        # pixels and the scores drift far beyond SERVED.
        qwen_sized = PacoReward.from_server(server.base_url, NAME, image_policy=ImagePolicy())
        pairs = [(images[1], images[2], THEME), (images[2], images[3], THEME)]
        drift = np.abs(qwen_sized.score_pairs(pairs) - local.score_pairs(pairs)).max()
        assert drift > 10 * SERVED, drift
