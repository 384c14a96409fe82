"""A judge of another family served by the stock vLLM CPU server: a tiny Gemma-3.

vLLM's CPU wheel serves it and ``PacoReward.from_server`` scores through it with nothing but
its URL and name (the yes/no ids from vLLM's ``/tokenize``, the images sent as they are: the
served folder's image processor has no pixel budget). The scores are NOT the in-process ones:
Gemma-3 lets an image's tokens attend to each other (a prefix-LM mask: ``token_type_ids`` in
transformers, ``is_mm_prefix_lm`` in vLLM), and vLLM's CPU attention backend has no such mask
(``CPUAttentionBackend.supports_mm_prefix()`` is False and ``CpuPlatform`` picks it anyway),
so it attends causally over the image tokens. The test pins that down: the served scores
equal transformers' forward with causal image attention, to the peer tests' EXACT, and differ
from Gemma-3's own by far more. The client side (template, images, yes/no extraction) is
thereby exact; the gap is the engine's. Should vLLM's CPU backend learn the mask, the first
assertion fails and the served scores should then equal the in-process ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from peer_settings import EXACT

from paco_reward import PacoReward
from paco_reward.templates import render_instruction
from paco_reward.testing import build_tiny_gemma3
from paco_reward.testing.gemma3 import model_card_score
from paco_reward.testing.vllm_server import VLLMServer
from paco_reward.yes_no import YesNoTokens

NAME = "Gemma-3-4B-IT"
THEME = "a red fox in four seasons"
SIZES = [(64, 64), (300, 120), (45, 97), (150, 150)]


@pytest.fixture(scope="module")
def gemma3_dir(tmp_path_factory):
    return build_tiny_gemma3(
        tmp_path_factory.mktemp("tiny-gemma3-vllm") / "model",
        seed=0,
        initializer_range=0.3,
        text_config={"initializer_range": 0.3},
    )


def test_vllm_cpu_serves_gemma3_with_causal_image_attention(
    gemma3_dir, random_images, tmp_path_factory
):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    images = [random_images(1, size=size, seed=k)[0] for k, size in enumerate(SIZES)]
    pairs = [(images[i], images[j], THEME) for i in range(4) for j in range(4) if i < j]
    in_process = PacoReward.from_pretrained(gemma3_dir, canonical_yes_no=False).score_pairs(pairs)
    model = AutoModelForImageTextToText.from_pretrained(gemma3_dir).eval()
    processor = AutoProcessor.from_pretrained(gemma3_dir)
    instruction = render_instruction("consistency", THEME)
    causal = np.array(
        [model_card_score(model, processor, a, b, instruction, "causal") for a, b, _ in pairs]
    )

    log = tmp_path_factory.mktemp("vllm-gemma3-logs") / "server.log"
    with VLLMServer(gemma3_dir, NAME, log_path=log) as server:
        rm = PacoReward.from_server(server.base_url, model=NAME, canonical_yes_no=False)
        assert rm.backend.image_policy is None
        tokens = YesNoTokens.from_tokenizer(processor.tokenizer, canonical=False)
        assert rm.backend.yes_no_token_ids == [*tokens.yes, *tokens.no]
        served = rm.score_pairs(pairs)
    gap = np.abs(served - in_process).max()
    print(f"\nvLLM CPU vs in-process Gemma-3: max |diff| = {gap:.2e}")
    assert gap > 100 * EXACT, "vLLM's CPU backend now attends bidirectionally over images"
    np.testing.assert_allclose(served, causal, rtol=0, atol=EXACT)
    assert np.ptp(served) > 0.05, "scores barely differ; the comparison would prove little"
