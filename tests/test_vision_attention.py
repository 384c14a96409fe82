"""The scorer's fast path is transformers' path: on tiny Qwen2.5-VL and Qwen3-VL models with the
real patch/window structure (Qwen2.5-VL: patch 14, window 112 px, merge 2) and 504 x 504
images (25 windows each), the vision tower's output is ``torch.equal`` to transformers' own
(fp32 and bf16), the scores equal a direct transformers forward to 1e-6 in fp32 and rank the
same in bf16, and one scored pair makes at most one attention call per distinct window length
per block (transformers' sdpa path makes one per window: 154 here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from scipy.stats import rankdata
from transformers import AutoModelForImageTextToText

from paco_reward import PacoReward, VisionAttentionError
from paco_reward.host_inputs import causal_padding_mask
from paco_reward.images import resize_for_model
from paco_reward.local_backend import LocalBackend
from paco_reward.modeling import load_evaluator_model_and_processor
from paco_reward.templates import render_instruction
from paco_reward.testing import build_tiny_qwen2_5_vl, build_tiny_qwen3_vl
from paco_reward.vision_attention import check_vision_attention, vision_attention_modules
from tests.test_modeling import DirectScorer

SIDE = 504  # 36 x 36 patches of 14 px, 18 x 18 merged tokens: 5 x 5 windows of 4 x 4 tokens
BUDGET = {"min_pixels": 28 * 28, "max_pixels": 512 * 512}
WIDE = {"initializer_range": 0.3}  # scores that spread, so parity and ranking checks bite
# The Qwen2.5-VL vision config's real window structure at a tiny width: blocks 0-2 windowed.
QWEN2_5_VISION = {"depth": 4, "window_size": 112, "fullatt_block_indexes": [3], **WIDE}


@pytest.fixture(scope="module")
def qwen2_5_dir(tmp_path_factory):
    return build_tiny_qwen2_5_vl(
        tmp_path_factory.mktemp("windowed") / "model",
        seed=2,
        **BUDGET,
        text_config=WIDE,
        vision_config=QWEN2_5_VISION,
    )


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    return build_tiny_qwen3_vl(
        tmp_path_factory.mktemp("qwen3-large") / "model",
        seed=2,
        **BUDGET,
        text_config=WIDE,
        vision_config=WIDE,
    )


@pytest.fixture(params=["qwen2_5", "qwen3"])
def folder(request):
    return request.getfixturevalue(f"{request.param}_dir")


def _images(n: int, seed: int) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 1, SIDE)[None, :, None]
    images = []
    for _ in range(n):  # gradients plus noise: varied enough for scores to spread
        start, end = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
        row = np.repeat(start * (1 - ramp) + end * ramp, SIDE, axis=0)
        noisy = row + rng.normal(0, 40, (SIDE, SIDE, 3))
        images.append(Image.fromarray(noisy.clip(0, 255).astype(np.uint8)))
    return images


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_vision_tower_output_is_transformers_own(folder, dtype):
    """Precomputed grid inputs, one-frame pixels and grouped window attention give exactly
    what transformers' forward computes from the processor's output."""
    images = _images(3, seed=0)
    reference_model, processor = load_evaluator_model_and_processor(folder, dtype=dtype)
    backend = LocalBackend(*load_evaluator_model_and_processor(folder, dtype=dtype))
    images = [img.resize((backend.image_policy.factor * 18,) * 2) for img in images]
    inputs = processor.image_processor(images=images, return_tensors="pt")
    with torch.inference_mode():
        reference = reference_model.get_image_features(
            inputs["pixel_values"], inputs["image_grid_thw"], return_dict=True
        )
        features, grids = backend.encode_images(images)
    assert torch.equal(grids, inputs["image_grid_thw"])
    for k, feature in enumerate(features):
        assert torch.equal(feature.fields["pooler_output"], reference.pooler_output[k])
        for block, ours in enumerate(feature.fields.get("deepstack_features", [])):
            assert torch.equal(ours, reference.deepstack_features[block][k])
    # the loaded instance changed, its class and other instances did not
    (attention, *_) = vision_attention_modules(backend.model)
    assert "forward" in vars(attention)
    assert not any("forward" in vars(m) for m in vision_attention_modules(reference_model))


def test_scores_equal_a_direct_transformers_forward(folder):
    """fp32: every score of pairs of 504 px images within 1e-6 of transformers' own forward
    of the same prompt (processor(text, images) + model(**inputs)), one pair at a time."""
    images = _images(4, seed=1)
    themes = ["a red fox", "the same knight, four battles, one castle"]
    pairs = [(images[i], images[j], themes[(i + j) % 2]) for i, j in [(0, 1), (2, 3), (1, 2)]]
    rm = PacoReward.from_pretrained(folder, canonical_yes_no=False, batch_size=2)
    ours = rm.score_pairs(pairs)
    direct = DirectScorer(folder)
    policy = rm.backend.image_policy
    reference = np.array(
        [
            direct.score(
                resize_for_model(a, policy),
                resize_for_model(b, policy),
                render_instruction("consistency", t),
            )
            for a, b, t in pairs
        ]
    )
    assert reference.std() > 1e-3, reference  # the pairs really differ
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6)


def test_bf16_ranks_pairs_as_transformers_does(folder):
    """bf16: the scorer and transformers' forward, both loaded in bf16, rank 6 pairs
    identically. Largest score difference measured: 4.5e-8 (Qwen2.5-VL) and 4.1e-9
    (Qwen3-VL): the vision tower is bit-equal and the language model runs the same kernels
    on pairs of one length (no padding)."""
    images = _images(4, seed=3)
    pairs = [(images[i], images[j], "a red fox") for i in range(4) for j in range(4) if i < j]
    rm = PacoReward.from_pretrained(folder, canonical_yes_no=False, dtype=torch.bfloat16)
    ours = rm.score_pairs(pairs)
    direct = DirectScorer(folder)
    # loaded in bf16 as the scorer is (a .to(bfloat16) would also round the rope frequencies)
    direct.model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.bfloat16).eval()
    policy = rm.backend.image_policy
    text = render_instruction("consistency", "a red fox")
    reference = np.array(
        [direct.score(resize_for_model(a, policy), resize_for_model(b, policy), text) for a, b, _ in pairs]
    )  # fmt: skip
    largest = float(np.abs(ours - reference).max())
    print(f"largest |scorer - transformers| in bf16: {largest:.2e}")
    assert np.ptp(reference) > 0.05, reference
    assert (rankdata(ours) == rankdata(reference)).all(), (ours, reference)
    assert largest < 1e-6


def _count_sdpa(monkeypatch) -> list[tuple[int, ...]]:
    """Record the query shape of every scaled_dot_product_attention call."""
    calls: list[tuple[int, ...]] = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(query, *args, **kwargs):
        calls.append(tuple(query.shape))
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    return calls


def test_one_attention_call_per_window_length_per_block(qwen2_5_dir, monkeypatch):
    """One scored pair: 3 window blocks x 3 window lengths (64, 32, 16 tokens: whole,
    edge, corner windows) + 1 full block x 1 length + 2 text layers = 12 calls, where
    transformers' sdpa path makes 3 x 50 + 2 + 2 = 154."""
    a, b = _images(2, seed=4)
    model, processor = load_evaluator_model_and_processor(qwen2_5_dir)
    vision = model.config.vision_config
    text_layers = model.config.text_config.num_hidden_layers
    windowed = vision.depth - len(vision.fullatt_block_indexes)
    backend = LocalBackend(*load_evaluator_model_and_processor(qwen2_5_dir))
    instruction = render_instruction("consistency", "a fox")

    calls = _count_sdpa(monkeypatch)
    backend.score_batch([a, b], [(0, 1, instruction)])
    window_lengths = {64, 32, 16}
    assert {shape[2] for shape in calls[: 3 * len(window_lengths)]} == window_lengths
    assert (
        len(calls)
        == windowed * len(window_lengths) + len(vision.fullatt_block_indexes) + text_layers
    )

    calls.clear()  # transformers' own forward of the same prompt, for the record
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                             {"type": "text", "text": instruction}]}]  # fmt: skip
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    with torch.inference_mode():
        model(**processor(text=[text], images=[a, b], return_tensors="pt"))
    assert len(calls) == windowed * 2 * 25 + 2 + text_layers == 154


def test_a_vision_attention_of_another_shape_fails_naming_its_class(qwen2_5_dir):
    model, processor = load_evaluator_model_and_processor(qwen2_5_dir)

    class OtherAttention(torch.nn.Module):
        def forward(self, hidden_states, cu_seqlens, rotary_pos_emb=None):
            return hidden_states

    model.model.visual.blocks[2].attn = OtherAttention()
    with pytest.raises(VisionAttentionError, match="OtherAttention.*no attribute 'qkv'"):
        LocalBackend(model, processor, vision_attention="grouped")
    # nothing was changed before the check failed
    assert not any("forward" in vars(m) for m in vision_attention_modules(model)[:2])
    with pytest.raises(VisionAttentionError, match=r"forward\('self', 'hidden_states'"):
        check_vision_attention(OtherAttention())


def test_causal_padding_mask_is_transformers_sdpa_mask():
    from transformers import Qwen2Config
    from transformers.masking_utils import create_causal_mask

    config = Qwen2Config(hidden_size=8, num_attention_heads=2, num_hidden_layers=1)
    config._attn_implementation = "sdpa"
    padding = torch.tensor([0, 3, 1])
    width = 6
    two_d = (torch.arange(width)[None, :] >= padding[:, None]).long()
    expected = create_causal_mask(
        config=config,
        inputs_embeds=torch.zeros(3, width, 8),
        attention_mask=two_d,
        past_key_values=None,
        position_ids=None,
    )
    assert torch.equal(causal_padding_mask(padding, width), expected)
