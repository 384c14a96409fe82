"""clip_t, clip_i and pickscore on tiny offline CLIP / PickScore models, each checked against
an independent computation with the model's own get_image_features / get_text_features."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import CLIPModel, CLIPProcessor

from paco_grpo.rewards import (
    CLIPImageReward,
    CLIPTextReward,
    PickScoreReward,
    build_reward,
    build_rewards,
)
from paco_reward.grids import split_grid
from paco_reward.testing.clip import build_tiny_clip
from paco_reward.testing.pickscore import build_tiny_pickscore

PROMPT = (
    "FOUR-PANEL Images with a 2x2 grid layout. A red fox. [TOP]-[LEFT]: a red circle. "
    "[TOP]-[RIGHT]: a blue square. [BOTTOM]-[LEFT]: a green star. [BOTTOM]-[RIGHT]: a black shape."
)
DESCRIPTIONS = ["a red circle.", "a blue square.", "a green star.", "a black shape."]
LONG = " ".join(["the red circle and the blue square in the same style"] * 12)


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return build_tiny_clip(tmp_path_factory.mktemp("clip") / "clip", seed=0)


@pytest.fixture(scope="module")
def pickscore_dir(tmp_path_factory):
    return build_tiny_pickscore(tmp_path_factory.mktemp("pick") / "pickscore", seed=1)


@pytest.fixture(scope="module")
def hand(clip_dir):
    """Independent embeddings: one image / one text per forward pass, straight from the model."""
    model = CLIPModel.from_pretrained(clip_dir).eval()
    processor = CLIPProcessor.from_pretrained(clip_dir)
    return _Hand(model, processor)


class _Hand:
    def __init__(self, model, processor):
        self.model, self.processor = model, processor

    def image(self, pil: Image.Image) -> np.ndarray:
        with torch.no_grad():
            pixels = self.processor(images=[pil], return_tensors="pt")["pixel_values"]
            e = self.model.get_image_features(pixel_values=pixels).pooler_output[0].double()
        return (e / e.norm()).numpy()

    def text_ids(self, ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            e = self.model.get_text_features(input_ids=torch.tensor([ids])).pooler_output[0]
        e = e.double()
        return (e / e.norm()).numpy()

    def text(self, text: str) -> np.ndarray:
        ids = self.processor.tokenizer(text, truncation=True, max_length=77)["input_ids"]
        return self.text_ids(ids)


def _grids(n: int, size: int = 64, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(3, size, size, generator=g) for _ in range(n)]


def _pil(t: torch.Tensor) -> Image.Image:
    return Image.fromarray((t.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))


def _panels(t: torch.Tensor) -> list[Image.Image]:
    from paco_reward.images import load_image

    return split_grid(load_image(t), 2, 2)


def test_clip_t_is_mean_panel_description_cosine(clip_dir, hand):
    reward = build_reward("clip_t", model=str(clip_dir))
    grids = _grids(3)
    three_markers = PROMPT.rsplit(" [BOTTOM]-[RIGHT]", 1)[0]
    scores = reward(
        grids,
        [PROMPT, "a red fox on a hill", three_markers],
        [{"layout": "2x2"}, {}, {"layout": "2x2"}],
    )
    expected0 = np.mean(
        [hand.image(p) @ hand.text(d) for p, d in zip(_panels(grids[0]), DESCRIPTIONS)]
    )
    # a prompt without panel markers: the whole image with the whole prompt
    expected1 = hand.image(_pil(grids[1])) @ hand.text("a red fox on a hill")
    np.testing.assert_allclose(scores[:2], [expected0, expected1], rtol=1e-5, atol=1e-6)
    assert np.isnan(scores[2]) and reward.num_failed == 1  # 3 descriptions for 4 panels
    # metadata["panel_prompts"] (the T2IS loader's) wins over the prompt's markers
    swapped = reward(grids[:1], [PROMPT], [{"panel_prompts": DESCRIPTIONS[::-1]}])
    expected = np.mean(
        [hand.image(p) @ hand.text(d) for p, d in zip(_panels(grids[0]), DESCRIPTIONS[::-1])]
    )
    np.testing.assert_allclose(swapped, [expected], rtol=1e-5, atol=1e-6)
    assert np.isfinite(scores[:2]).all() and scores[0] != scores[1]


def test_clip_t_can_read_each_panel_description_after_the_global_description(clip_dir, hand):
    reward = CLIPTextReward(clip_dir, global_description=True)
    grid = _grids(1, seed=4)
    score = reward(grid, [PROMPT], [{"layout": "2x2"}])
    texts = [f"FOUR-PANEL Images with a 2x2 grid layout. A red fox. {d}" for d in DESCRIPTIONS]
    expected = np.mean([hand.image(p) @ hand.text(t) for p, t in zip(_panels(grid[0]), texts)])
    np.testing.assert_allclose(score, [expected], rtol=1e-5, atol=1e-6)
    assert score[0] != pytest.approx(CLIPTextReward(clip_dir)(grid, [PROMPT], [{}])[0])


LAYOUT_2X2 = [{"layout": "2x2"}]  # the long prompt names no layout


def test_clip_t_long_text_truncates_with_a_warning_or_splits_and_averages(clip_dir, hand, caplog):
    grid = _grids(1, seed=3)
    long_prompt = (
        f"A fox. [TOP]-[LEFT]: {LONG} [TOP]-[RIGHT]: b. [BOTTOM]-[LEFT]: c. [BOTTOM]-[RIGHT]: d."
    )
    panels = _panels(grid[0])
    image0 = hand.image(panels[0])
    rest = [hand.image(p) @ hand.text(d) for p, d in zip(panels[1:], ["b.", "c.", "d."])]

    truncating = CLIPTextReward(clip_dir)
    with caplog.at_level(logging.WARNING, logger="paco_grpo.rewards"):
        truncated = truncating(grid, [long_prompt], LAYOUT_2X2)
        truncating(grid, [long_prompt], LAYOUT_2X2)
    warnings = [r for r in caplog.records if "truncated" in r.getMessage()]
    assert len(warnings) == 1 and truncating.encoder.num_truncated == 2  # warned once, counted
    assert "long_text='split'" in warnings[0].getMessage()
    assert "warn_long_text=False" in warnings[0].getMessage()
    np.testing.assert_allclose(
        truncated, [np.mean([image0 @ hand.text(LONG), *rest])], rtol=1e-5, atol=1e-6
    )

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="paco_grpo.rewards"):
        CLIPTextReward(clip_dir, warn_long_text=False)(grid, [long_prompt], LAYOUT_2X2)
    assert not [r for r in caplog.records if "truncated" in r.getMessage()]

    split = CLIPTextReward(clip_dir, long_text="split")(grid, [long_prompt], LAYOUT_2X2)
    ids = hand.processor.tokenizer(LONG)["input_ids"]
    body = ids[1:-1]
    chunks = [[ids[0], *body[s : s + 75], ids[-1]] for s in range(0, len(body), 75)]
    assert len(chunks) >= 2
    split_cos = np.mean([image0 @ hand.text_ids(c) for c in chunks])
    np.testing.assert_allclose(split, [np.mean([split_cos, *rest])], rtol=1e-5, atol=1e-6)
    assert split[0] != truncated[0]


def test_clip_i_is_mean_pairwise_panel_cosine(clip_dir, hand):
    reward = CLIPImageReward(clip_dir, layout="2x2")
    grids = _grids(2, seed=5)
    same = torch.zeros(3, 64, 64) + torch.rand(
        3, 32, 32, generator=torch.Generator().manual_seed(1)
    ).repeat(1, 2, 2)
    scores = reward([*grids, same], ["p"] * 3, [{}] * 3)
    expected = []
    for grid in grids:
        emb = [hand.image(p) for p in _panels(grid)]
        expected.append(np.mean([emb[i] @ emb[j] for i in range(4) for j in range(i + 1, 4)]))
    np.testing.assert_allclose(scores[:2], expected, rtol=1e-5, atol=1e-6)
    assert scores[2] == pytest.approx(1.0, abs=1e-6)  # four identical panels
    bad = reward([grids[0][:, :1]], ["p"], [{}])  # one row cannot be cut in two
    assert np.isnan(bad[0]) and reward.num_failed == 1


def test_pickscore_is_scaled_logit_cosine(pickscore_dir):
    reward = build_reward("pickscore", model=str(pickscore_dir), processor=str(pickscore_dir))
    model = CLIPModel.from_pretrained(pickscore_dir).eval()
    hand = _Hand(model, CLIPProcessor.from_pretrained(pickscore_dir))
    grids = _grids(2, seed=7)
    prompts = ["a red circle", "a blue square in the same style"]
    scores = reward(grids, prompts, [{}, {}])
    scale = float(model.logit_scale.detach().exp())
    assert scale == pytest.approx(100.0, rel=1e-5)
    expected = [scale * (hand.image(_pil(g)) @ hand.text(p)) / 26 for g, p in zip(grids, prompts)]
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    raw = PickScoreReward(pickscore_dir, processor=pickscore_dir, scale=1)(grids, prompts, [{}, {}])
    np.testing.assert_allclose(raw, np.asarray(expected) * 26, rtol=1e-5, atol=1e-5)
    assert np.isnan(reward(grids[:1], [""], [{}])[0])


def test_async_twin_equals_call(clip_dir):
    reward = CLIPTextReward(clip_dir)
    grids = _grids(2, seed=9)
    sync = reward(grids, [PROMPT, PROMPT], [{}, {}])
    np.testing.assert_array_equal(
        asyncio.run(reward.acall(grids, [PROMPT, PROMPT], [{}, {}])), sync
    )


def test_clip_reward_validation(clip_dir):
    with pytest.raises(ValueError, match=r"long_text must be one of \('truncate', 'split'\)"):
        CLIPTextReward(clip_dir, long_text="chunk")
    with pytest.raises(ValueError, match="dtype must be one of"):
        CLIPImageReward(clip_dir, dtype="fp8")
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        CLIPImageReward(clip_dir, batch_size=0)
    with pytest.raises(ValueError, match="pickscore scale must be a number > 0"):
        PickScoreReward(clip_dir, processor=clip_dir, scale=0)
    reward = CLIPImageReward(clip_dir)
    with pytest.raises(ValueError, match="got 2 images, 1 prompts and 2 metadata"):
        reward(_grids(2), ["p"], [{}, {}])
    with pytest.raises(ValueError, match="Unknown reward 'clip'"):
        build_reward("clip")


STRIP_PROMPT = (
    "FOUR-PANEL Images with a 1x4 grid layout. A red fox. [PANEL-1]: a red circle. "
    "[PANEL-2]: a blue square. [PANEL-3]: a green star. [PANEL-4]: a black shape."
)


def test_a_1x4_text_prompt_is_cut_1x4_by_the_clip_rewards(clip_dir, hand, tmp_path):
    """Loaded from a text prompt file, with the reward told "2x2" explicitly: the prompt's own
    layout wins (it used to be cut 2x2 without a word)."""
    from paco_grpo.data import load_prompts

    path = tmp_path / "strips.txt"
    path.write_text(STRIP_PROMPT + "\n")
    (item,) = load_prompts(path, layout="2x2")
    strip = torch.rand(3, 32, 128, generator=torch.Generator().manual_seed(7))
    panels = split_grid(_pil(strip), 1, 4)
    emb = [hand.image(p) for p in panels]
    clip_i = CLIPImageReward(clip_dir, layout="2x2")([strip], [item.prompt], [item.metadata])
    expected_i = np.mean([emb[i] @ emb[j] for i in range(4) for j in range(i + 1, 4)])
    np.testing.assert_allclose(clip_i, [expected_i], rtol=1e-5, atol=1e-6)
    clip_t = CLIPTextReward(clip_dir, layout="2x2")([strip], [item.prompt], [item.metadata])
    expected_t = np.mean([e @ hand.text(d) for e, d in zip(emb, DESCRIPTIONS)])
    np.testing.assert_allclose(clip_t, [expected_t], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        "meta",  # a device no default would pick: proves the device is passed, on any machine
        pytest.param(
            "cuda",  # a bare "cuda" is this process's GPU, with its index (GPU machines only)
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ),
    ],
)
def test_build_rewards_puts_the_clip_model_on_the_process_device(clip_dir, device):
    from paco_grpo.async_rewards import AsyncRewardRunner
    from paco_reward.devices import resolve_device

    rewards = build_rewards(
        {"clip_i": 1.0, "panel_colour_agreement": 1.0},
        {"clip_i": {"model": str(clip_dir)}},
        device=device,
    )
    reward, want = rewards["clip_i"], resolve_device(device)
    assert reward.device == want and reward.encoder.device == want
    assert want.type != "cuda" or want.index is not None
    assert {p.device for p in reward.encoder.model.parameters()} == {want}
    if want.type == "meta":
        return
    grids = _grids(2, seed=3)
    expected = CLIPImageReward(clip_dir, device="cpu")(grids, [PROMPT] * 2, [{}] * 2)
    with AsyncRewardRunner(rewards, device=device) as runner:  # scored in a worker thread
        batch = runner.submit(grids, [PROMPT] * 2, [{}] * 2).result()
    np.testing.assert_allclose(batch.scores["clip_i"], expected, rtol=1e-4, atol=1e-5)
