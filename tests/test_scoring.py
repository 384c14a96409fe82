"""PacoReward on a tiny real Qwen2.5-VL: parity with the model card, batching, symmetry,
sets and grids, ranking, explanations, editing scores and adapters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

from benchmarks.model_card_snippet import ModelCardScorer
from paco_reward import PacoReward
from paco_reward.images import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS
from paco_reward.testing import build_tiny_qwen2_5_vl

# The wording of the theme template, typed out here on purpose (not rendered by
# our code) so the test also pins the template text.
THEME_PROMPT = (
    'Given two subfigures generated based on the theme: "{theme}", do the two images maintain '
    "consistency in terms of style, logic and identity? "
    'Answer "Yes" and "No" first, and then provide detailed reasons.'
)


@pytest.fixture(scope="module")
def qwen_budget_model_dir(tmp_path_factory):
    """A tiny model whose processor has Qwen2.5-VL's real pixel budget, so the model card's
    ``process_vision_info`` resizing and the processor agree exactly as on the 7B model."""
    return build_tiny_qwen2_5_vl(
        tmp_path_factory.mktemp("tiny-qwen-budget") / "model",
        seed=1,
        min_pixels=QWEN_MIN_PIXELS,
        max_pixels=QWEN_MAX_PIXELS,
        text_config={"initializer_range": 0.3},
        vision_config={"initializer_range": 0.3},
    )


def test_parity_with_model_card_snippet(qwen_budget_model_dir, random_images):
    rm = PacoReward.from_pretrained(qwen_budget_model_dir, canonical_yes_no=False)
    snippet = ModelCardScorer(rm.backend.model, rm.backend.processor)
    images = random_images(2, size=(64, 64), seed=0) + random_images(2, size=(90, 60), seed=1)
    images.append(Image.new("RGBA", (70, 100), (10, 200, 30, 128)))  # non-RGB, odd size
    themes = ["a red fox in four seasons", "the same knight, four battles"]
    pairs = [
        (images[i], images[j], themes[(i + j) % 2]) for i in range(5) for j in range(5) if i != j
    ]
    ours = rm.score_pairs(pairs)
    reference = np.array([snippet.score(a, b, THEME_PROMPT.format(theme=t)) for a, b, t in pairs])
    assert reference.std() > 0.01, "scores barely differ; the parity check would be vacuous"
    np.testing.assert_allclose(ours, reference, atol=1e-4)


def test_canonical_score_sums_all_yes_no_variants(tiny_reward, tiny_model_dir, random_images):
    a, b = random_images(2)
    snippet = ModelCardScorer(tiny_reward.backend.model, tiny_reward.backend.processor)
    inputs_text = THEME_PROMPT.format(theme="a fox")
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": a},
                {"type": "image", "image": b},
                {"type": "text", "text": inputs_text},
            ],
        }
    ]
    processor = snippet.processor
    from qwen_vl_utils import process_vision_info

    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    images, _ = process_vision_info(messages)
    with torch.no_grad():
        logits = snippet.model(**processor(text=[text], images=images, return_tensors="pt")).logits[
            0, -1
        ]
    probs = torch.softmax(logits.double(), -1)
    tok = processor.tokenizer
    yes = sum(
        probs[tok.convert_tokens_to_ids(t)] for t in ["Yes", "yes", "YES", "ĠYes", "Ġyes", "ĠYES"]
    )
    no = sum(probs[tok.convert_tokens_to_ids(t)] for t in ["No", "no", "NO", "ĠNo", "Ġno", "ĠNO"])
    assert tiny_reward.score(a, b, "a fox") == pytest.approx(float(yes / (yes + no)), abs=1e-5)


def test_batched_equals_one_at_a_time(tiny_reward, random_images):
    # Different image sizes (1, 2 and 4 vision tokens) and prompt lengths force real left padding.
    images = (
        random_images(2, (28, 28), 0)
        + random_images(2, (56, 28), 1)
        + random_images(2, (56, 56), 2)
    )
    themes = ["fox", "a much longer theme about a knight riding through a misty valley at dawn"]
    pairs = [
        (images[i], images[(i + 1 + k) % 6], themes[k % 2]) for i in range(6) for k in range(3)
    ]
    batched = tiny_reward.score_pairs(pairs)
    single = np.array([tiny_reward.score(a, b, t) for a, b, t in pairs])
    assert single.std() > 0.01
    np.testing.assert_allclose(batched, single, atol=1e-4)


def test_scores_are_deterministic_probabilities(tiny_reward, random_images):
    pairs = [(a, b, "fox") for a, b in zip(random_images(4, seed=3), random_images(4, seed=4))]
    first, second = tiny_reward.score_pairs(pairs), tiny_reward.score_pairs(pairs)
    np.testing.assert_array_equal(first, second)
    assert ((first > 0) & (first < 1)).all()


def test_symmetric_averages_both_orders(tiny_reward, random_images):
    a, b = random_images(2, seed=5)
    forward, backward = tiny_reward.score(a, b, "fox"), tiny_reward.score(b, a, "fox")
    assert abs(forward - backward) > 1e-3, "position bias expected on a random model"
    assert tiny_reward.score(a, b, "fox", symmetric=True) == pytest.approx(
        (forward + backward) / 2, abs=1e-6
    )
    assert tiny_reward.score(a, b, "fox", symmetric=True) == pytest.approx(
        tiny_reward.score(b, a, "fox", symmetric=True), abs=1e-6
    )


def _count_encoded_images(model):
    """Count the images the vision tower actually encodes (rows of grid_thw)."""
    seen = []

    def hook(module, args, kwargs):
        seen.append(int(kwargs.get("grid_thw", args[1] if len(args) > 1 else None).shape[0]))

    return seen, model.model.visual.register_forward_pre_hook(hook, with_kwargs=True)


def test_score_set_encodes_each_image_once_and_matches_pairs(tiny_reward, random_images):
    images = random_images(4, seed=6)
    seen, handle = _count_encoded_images(tiny_reward.backend.model)
    try:
        result = tiny_reward.score_set(images, "fox")
    finally:
        handle.remove()
    assert sum(seen) == 4
    assert result.pairs == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    expected = tiny_reward.score_pairs([(images[i], images[j], "fox") for i, j in result.pairs])
    np.testing.assert_allclose(result.scores, expected, atol=1e-5)
    assert np.isnan(np.diag(result.matrix)).all()
    np.testing.assert_allclose(result.matrix, result.matrix.T, equal_nan=True)
    assert result.mean == pytest.approx(expected.mean())


def test_a_set_of_one_image_is_refused_not_scored_nan(tiny_reward, random_images):
    """score_set of one image returned mean=nan silently (a NaN that a trainer's mean or a
    report would carry on)."""
    from paco_reward import InputError

    (image,) = random_images(1, seed=6)
    for images in ([image], []):
        with pytest.raises(InputError, match=rf"needs two images or more; got {len(images)}"):
            tiny_reward.score_set(images, "fox")
    with pytest.raises(InputError, match="score"):
        tiny_reward.score_grid(image, "fox", layout=(1, 1))  # a grid of one panel


def test_score_set_symmetric_scores_both_orders(tiny_reward, random_images):
    images = random_images(3, seed=7)
    result = tiny_reward.score_set(images, "fox", symmetric=True)
    for (i, j), s in zip(result.pairs, result.scores):
        both = tiny_reward.score_pairs(
            [(images[i], images[j], "fox"), (images[j], images[i], "fox")]
        )
        assert s == pytest.approx(both.mean(), abs=1e-5)


@pytest.mark.parametrize(
    ("prompt", "layout", "rows", "cols"),
    [
        (
            "FOUR-PANEL Images with a 2x2 grid layout. A fox. [TOP]-[LEFT]: a. [TOP]-[RIGHT]: b.",
            None,
            2,
            2,
        ),
        ("THREE-PANEL Images with a 1x3 grid layout of a fox", None, 1, 3),
        ("a 2 ⨉ 3 storyboard of a fox", None, 2, 3),
        ("a fox", (3, 1), 3, 1),
    ],
)
def test_score_grid_layouts(tiny_reward, random_images, prompt, layout, rows, cols):
    panels = random_images(rows * cols, (56, 56), seed=8)
    grid = Image.new("RGB", (56 * cols, 56 * rows))
    for k, panel in enumerate(panels):
        grid.paste(panel, ((k % cols) * 56, (k // cols) * 56))
    seen, handle = _count_encoded_images(tiny_reward.backend.model)
    try:
        result = tiny_reward.score_grid(grid, prompt, layout=layout)
    finally:
        handle.remove()
    n = rows * cols
    assert sum(seen) == n
    assert len(result.pairs) == n * (n - 1) // 2
    from paco_reward.grids import split_panel_prompts

    theme = split_panel_prompts(prompt)[0]
    np.testing.assert_allclose(
        result.scores, tiny_reward.score_set(panels, theme).scores, atol=1e-5
    )


def test_score_grid_uses_global_description_as_theme(tiny_reward, random_images):
    panels = random_images(4, (56, 56), seed=9)
    grid = Image.new("RGB", (112, 112))
    for k, panel in enumerate(panels):
        grid.paste(panel, ((k % 2) * 56, (k // 2) * 56))
    prompt = "2x2 grid layout, a fox in four seasons. [TOP]-[LEFT]: spring. [TOP]-[RIGHT]: summer."
    a = tiny_reward.score_grid(grid, prompt)
    b = tiny_reward.score_set(panels, "2x2 grid layout, a fox in four seasons.")
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)


def test_rank_orders_by_score_with_stable_ties(tiny_reward, random_images):
    ref, *cands = random_images(4, seed=10)
    ranking = tiny_reward.rank(ref, cands)
    expected = tiny_reward.score_pairs([(ref, c) for c in cands], template="rank")
    np.testing.assert_allclose(ranking.scores, expected, atol=1e-6)
    assert [expected[i] for i in ranking.order] == sorted(expected, reverse=True)
    tied = tiny_reward.rank(ref, [cands[0], cands[0], cands[0]])
    assert tied.order == [0, 1, 2]


def test_explain_returns_the_same_score_and_greedy_text(tiny_reward, random_images):
    a, b = random_images(2, seed=11)
    judgement = tiny_reward.explain(a, b, "fox", max_new_tokens=12)
    assert judgement.score == pytest.approx(tiny_reward.score(a, b, "fox"), abs=1e-6)
    assert (
        judgement.text
        and judgement.text == tiny_reward.explain(a, b, "fox", max_new_tokens=12).text
    )
    assert judgement.answer and judgement.answer in judgement.text


@pytest.mark.parametrize(
    ("text", "answer", "reasons"),
    [
        ("Yes. Both show the same fox.", "Yes", "Both show the same fox."),
        (" No,\nthe fur differs", "No", "the fur differs"),
        ('"Yes" - same style', "Yes", "- same style"),
        ("No", "No", ""),
        ("", "", ""),
    ],
)
def test_split_answer(text, answer, reasons):
    from paco_reward.reward import split_answer

    assert split_answer(text) == (answer, reasons)


def test_score_edit_combines_consistency_and_following(tiny_reward, random_images):
    src, out = random_images(2, seed=12)
    result = tiny_reward.score_edit(src, out, "make the sky purple")
    sc = tiny_reward.score(src, out, "make the sky purple", template="edit_consistency")
    pf = tiny_reward.score(src, out, "make the sky purple", template="edit_following")
    assert result.consistency == pytest.approx(sc, abs=1e-6)
    assert result.prompt_following == pytest.approx(pf, abs=1e-6)
    assert result.overall == pytest.approx(math.sqrt(sc * pf), abs=1e-6)
    assert sc != pytest.approx(pf, abs=1e-4)


def test_custom_template_and_criteria(tiny_reward, random_images):
    a, b = random_images(2, seed=13)
    criterion = "The fox's fur colour must be identical in both images."
    via_name = tiny_reward.score(a, b, criterion, template="criteria")
    via_string = tiny_reward.score(
        a,
        b,
        criterion,
        template="Do images meet the following criteria? {prompt} Please answer Yes or No first, then provide detailed reasons.",
    )
    assert via_name == pytest.approx(via_string, abs=1e-7)
    assert via_name != pytest.approx(tiny_reward.score(a, b, criterion), abs=1e-4)


def test_lora_adapter_is_applied(tiny_model_dir, tmp_path, random_images):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2_5_VLForConditionalGeneration

    from paco_reward.templates import render_instruction

    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_model_dir)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    torch.manual_seed(0)
    peft_model = get_peft_model(base, config).eval()
    peft_model.save_pretrained(tmp_path / "adapter")
    a, b = random_images(2, seed=14)

    plain = PacoReward.from_pretrained(tiny_model_dir)
    merged = PacoReward.from_pretrained(tiny_model_dir, adapter=tmp_path / "adapter")
    unmerged = PacoReward.from_pretrained(
        tiny_model_dir, adapter=tmp_path / "adapter", merge_adapter=False
    )
    assert merged.score(a, b, "fox") != pytest.approx(plain.score(a, b, "fox"), abs=1e-3)
    assert merged.score(a, b, "fox") == pytest.approx(unmerged.score(a, b, "fox"), abs=1e-4)

    # The model card's snippet run on the PEFT model itself gives the same exact-token score.
    exact = PacoReward.from_pretrained(
        tiny_model_dir, adapter=tmp_path / "adapter", canonical_yes_no=False
    )
    snippet = ModelCardScorer(peft_model, plain.backend.processor)
    reference = snippet.score(a, b, render_instruction("consistency", "fox"))
    assert exact.score(a, b, "fox") == pytest.approx(reference, abs=1e-4)


def test_dtype_and_device_options(tiny_model_dir, random_images):
    rm = PacoReward.from_pretrained(tiny_model_dir, device="cpu", dtype="bfloat16")
    assert rm.backend.model.dtype == torch.bfloat16
    a, b = random_images(2, seed=15)
    full = PacoReward.from_pretrained(tiny_model_dir).score(a, b, "fox")
    assert rm.score(a, b, "fox") == pytest.approx(full, abs=0.05)


def test_each_distinct_input_is_decoded_resized_and_hashed_once(tiny_reward, monkeypatch):
    """The GRPO reward's call: every panel pair of a 2x2 grid, each panel in three pairs."""
    import paco_reward.reward as reward_module
    from paco_reward.grids import split_grid

    resized = []
    resize = reward_module.resize_for_model

    def counting(image, policy, name="image"):
        resized.append(name)
        return resize(image, policy, name)

    monkeypatch.setattr(reward_module, "resize_for_model", counting)
    grid = Image.fromarray(np.random.default_rng(0).integers(0, 256, (112, 112, 3), np.uint8))
    panels = split_grid(grid, 2, 2)
    pairs = [(panels[i], panels[j], "a fox") for i in range(4) for j in range(i + 1, 4)]
    scores = tiny_reward.score_pairs(pairs)
    assert len(resized) == 4, resized
    np.testing.assert_allclose(scores, tiny_reward.score_set(panels, "a fox").scores, atol=1e-6)


def test_questions_on_one_pair_share_its_prefix_and_score_as_the_model_card(
    qwen_budget_model_dir, tiny_qwen3_vl_dir, random_images
):
    """T2IS-Bench asks every pair of a case each criterion: the prompt up to the question
    runs once per pair (LocalBackend.share_prefixes); the scores are the model card's."""
    rm = PacoReward.from_pretrained(qwen_budget_model_dir, canonical_yes_no=False, batch_size=3)
    snippet = ModelCardScorer(rm.backend.model, rm.backend.processor)
    images = random_images(2, size=(64, 64), seed=3) + random_images(2, size=(90, 60), seed=4)
    texts = ["The fox is the same fox.", "Its tail is as long in every panel, and as red.",
             "All are watercolour.", "Time goes on from panel to panel."]  # fmt: skip
    pairs = [(images[i], images[j], t) for i in range(4) for j in range(4) if i != j for t in texts]
    shared = rm.score_pairs(pairs, template="t2is")
    question = "Do images meet the following criteria? {} Please answer Yes or No."
    reference = np.array([snippet.score(a, b, question.format(t)) for a, b, t in pairs])
    assert reference.std() > 0.01
    np.testing.assert_allclose(shared, reference, atol=1e-4)
    same_size = [k for k, (a, b, _) in enumerate(pairs) if a.size == b.size == (64, 64)]  # unpadded
    np.testing.assert_allclose(rm.score_pairs([pairs[k] for k in same_size], template="t2is"),
                               reference[same_size], atol=1e-4)  # fmt: skip
    rm.backend.share_prefixes = False
    # float32: a cached prefix and a full pass reduce in another order (seen up to 2.1e-6)
    np.testing.assert_allclose(rm.score_pairs(pairs, template="t2is"), shared, atol=1e-5)
    # Qwen3-VL's DeepStack features take the row-per-question path, with the same scores
    qwen3 = PacoReward.from_pretrained(tiny_qwen3_vl_dir, canonical_yes_no=False)
    first = qwen3.score_pairs(pairs[:8], template="t2is")
    qwen3.backend.share_prefixes = False
    np.testing.assert_allclose(qwen3.score_pairs(pairs[:8], template="t2is"), first, atol=1e-5)
