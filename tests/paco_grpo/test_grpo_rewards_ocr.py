"""The ``ocr`` reward: its edit distance and score against rapidfuzz's Levenshtein on many
seeded random strings, the default rule against Flow-GRPO's released OCR reward restated here,
the quoted-text rules, and the reward on a tiny random GOT-OCR 2.0 built offline against that
model's own greedy ``generate`` on the same images."""

from __future__ import annotations

import asyncio
import random
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from rapidfuzz.distance import Levenshtein
from transformers import AutoModelForImageTextToText, AutoProcessor

from paco_grpo.rewards import REWARDS, OCRReward, build_reward
from paco_grpo.rewards.ocr_text import edit_distance, normalize_text, ocr_score, quoted_text
from paco_grpo.rewards.registry import _takes_device
from paco_reward.errors import PromptError, UnsupportedModelError
from paco_reward.testing.got_ocr2 import build_tiny_got_ocr2

# Letters that collide often (so distances are small and varied), case pairs, whitespace of
# several kinds, a full-width letter and a combining accent (NFKC's business), a letter whose
# case folding is not its lower case (ß -> ss), punctuation.
ALPHABET = "abcsAB \t\n\u00a0Ｃé\u0301ß.-'1"
MAX_NEW_TOKENS = 6


def _random_string(rng: random.Random, longest: int = 24) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))


def _expected_score(read: str, target: str, match: str = "contains") -> float:
    """The score spelt out independently: NFKC, casefold, whitespace out; 1.0 for a reading
    that holds the target under ``contains``, else the clipped rapidfuzz distance."""

    def norm(s: str) -> str:
        return re.sub(r"\s+", "", unicodedata.normalize("NFKC", s).casefold())

    t = norm(target)
    if match == "contains" and t in norm(read):
        return 1.0
    return 1.0 - min(1.0, Levenshtein.distance(norm(read), t) / len(t))


# Flow-GRPO's OCR reward as released (yifan123/flow_grpo @ ac4c86e, flow_grpo/ocr.py,
# OcrScorer.__call__), restated for one image from reading it: the prompt's text between its
# first pair of straight quotes; reading and target lower-cased with their spaces removed; no
# distance when the target is in the reading, else their Levenshtein distance, at most the
# target's length; the reward 1 - distance / length. (PaddleOCR's lines are joined with "".)
def _flow_grpo_reward(recognized_text: str, prompt: str) -> float:
    target = prompt.split('"')[1].replace(" ", "").lower()
    text = recognized_text.replace(" ", "").lower()
    dist = 0 if target in text else Levenshtein.distance(text, target)
    return 1 - min(dist, len(target)) / len(target)


# ---------------------------------------------------------------- the text side
def test_edit_distance_equals_rapidfuzz_on_random_strings():
    rng = random.Random(0)
    for _ in range(3000):
        a, b = _random_string(rng), _random_string(rng)
        expected = Levenshtein.distance(a, b)
        assert edit_distance(a, b) == expected, (a, b)
        cutoff = rng.randint(1, 12)
        assert edit_distance(a, b, cutoff=cutoff) == min(expected, cutoff), (a, b, cutoff)


def test_ocr_score_is_one_minus_the_clipped_normalized_distance():
    rng = random.Random(1)
    scores = []
    for _ in range(2000):
        read, target = _random_string(rng), _random_string(rng)
        if not normalize_text(target):
            continue
        prompt = f'A sign that says "{target}"'
        for match in ("exact", "contains"):
            score = ocr_score(read, prompt, match=match)
            expected = _expected_score(read, target, match)
            assert score == pytest.approx(expected, abs=1e-12), (read, target, match)
            assert 0.0 <= score <= 1.0
        scores.append(ocr_score(read, prompt, match="exact"))
    assert len(scores) > 1500 and len(set(scores)) > 50  # the check saw many distinct scores


# ASCII as Flow-GRPO's prompts and PaddleOCR's readings hold it: both cases, spaces, digits,
# punctuation; letters that collide often, so that readings often hold their target.
FLOW_GRPO_ALPHABET = "abcABC  1.-!"


def test_the_default_rule_is_flow_grpos_ocr_reward():
    """On seeded random readings and prompts of one to three quoted spans (the target, a
    slice of the reading, often), the default score equals the released function's, case and
    spaces included; ``match="exact"`` differs exactly where the reading holds more than the
    target."""
    rng = random.Random(2)

    def text(longest: int) -> str:
        return "".join(rng.choice(FLOW_GRPO_ALPHABET) for _ in range(rng.randint(1, longest)))

    seen = {"contains": 0, "distance": 0, "exact_lower": 0}
    for _ in range(3000):
        read = text(16)
        start = rng.randrange(len(read))
        first = read[start : start + rng.randint(1, 6)] if rng.random() < 0.5 else text(8)
        if first.replace(" ", "") == "":
            continue  # Flow-GRPO divides by zero there; ours is a PromptError (below)
        if rng.random() < 0.5:
            first = first.swapcase()
        others = "".join(f' and "{text(6)}"' for _ in range(rng.randint(0, 2)))
        prompt = f'A sign that says "{first}"{others} in neon'
        released = _flow_grpo_reward(read, prompt)
        assert ocr_score(read, prompt) == pytest.approx(released, abs=1e-12), (read, prompt)
        exact = ocr_score(read, prompt, match="exact")
        target = first.replace(" ", "").lower()
        holds = target in read.replace(" ", "").lower()
        seen["contains" if holds else "distance"] += 1
        if holds and read.replace(" ", "").lower() != target:
            assert exact < released == 1.0, (read, prompt)
            seen["exact_lower"] += 1
        elif not holds:
            assert exact == released, (read, prompt)
    assert min(seen.values()) > 300, seen  # every branch was exercised, many times

    # the example, and the normalisation of case and spaces
    sign = 'A sign: "open"'
    assert _flow_grpo_reward("OPEN NOW", sign) == ocr_score("OPEN NOW", sign) == 1.0
    assert ocr_score("OPEN NOW", sign, match="exact") == 0.25
    assert ocr_score("o P e N", sign) == _flow_grpo_reward("o P e N", sign) == 1.0
    prompt = 'A mug that says "Good" and a plate that says "Morning"'
    assert ocr_score("GOOD", prompt) == _flow_grpo_reward("GOOD", prompt) == 1.0  # the first span
    assert ocr_score("GOOD", prompt, spans="all") == pytest.approx(1 - 7 / 11)
    with pytest.raises(PromptError, match="is empty"):
        ocr_score("OPEN", 'A sign that says "  "')
    with pytest.raises(ValueError, match=r"match must be one of \('contains', 'exact'\)"):
        ocr_score("OPEN", 'A sign: "open"', match="fuzzy")
    with pytest.raises(ValueError, match=r"spans must be one of \('first', 'all'\)"):
        quoted_text('A sign: "open"', spans="last")


def test_normalization_ignores_case_whitespace_and_width_but_not_punctuation():
    assert normalize_text(" Open\n24 /\t7\u00a0") == "open24/7"
    assert normalize_text("ＯＰＥＮ") == "open"  # full-width forms (NFKC)
    assert normalize_text("Cafe\u0301") == normalize_text("Café") == "café"  # composed accent
    assert normalize_text("STRASSE") == normalize_text("Straße") == "strasse"  # case folding
    prompt = 'A neon sign that says "OPEN 24/7"'
    assert ocr_score("open 24/7", prompt) == 1.0
    assert ocr_score("OPEN 24-7", prompt) == pytest.approx(1 - 1 / 8)  # "open24/7": 8
    assert ocr_score("", prompt) == 0.0  # read nothing: as far from the text as can be
    assert ocr_score("OPEN 24/7 OPEN 24/7 OPEN", prompt, match="exact") == 0.0  # clipped at 0
    assert ocr_score("OPEN 24/7 OPEN 24/7 OPEN", prompt) == 1.0  # but it holds the text


def test_quoted_text_reads_the_first_or_every_span_and_refuses_prompts_without_one():
    assert quoted_text('A mug that says "Good" and a plate, “Morning”') == "Good"
    assert quoted_text('A mug that says "Good" and a plate, “Morning”', "all") == "Good Morning"
    assert quoted_text('A mug that says “Good” and a plate, "Morning"') == "Good"
    assert quoted_text("""A sign saying "Don't Stop" by Joe's diner""") == "Don't Stop"
    # two spans read as one run of characters: the OCR model may read them on one line
    prompt = 'A mug "Good" and a plate "Morning"'
    assert ocr_score("GOODMORNING", prompt, match="exact", spans="all") == 1.0
    for prompt, match in [
        ("A storefront at dusk", "no quoted text"),
        ("Joe's diner, 'OPEN'", "no quoted text"),  # single quotes are not read
        ('A sign that says "OPEN', "unbalanced double quotes"),
        ('A sign that says “OPEN"', "unbalanced double quotes"),
        ('A sign that says "  "', "quoted text .* is empty"),
        ('A sign that says " " and "OPEN"', "quoted text .* is empty"),  # the first span
        (None, "must be a string"),
    ]:
        with pytest.raises(PromptError, match=match):
            quoted_text(prompt)


# ---------------------------------------------------------------- the reward on a tiny model
@pytest.fixture(scope="module")
def ocr_dir(tmp_path_factory):
    return build_tiny_got_ocr2(tmp_path_factory.mktemp("ocr") / "tiny-ocr", seed=0)


@pytest.fixture(scope="module")
def images():
    """Six pictures as the trainer and users pass them: float CHW tensors, PIL, uint8 HWC."""
    g = torch.Generator().manual_seed(0)
    tensors = [torch.rand(3, 48 + 16 * k, 64, generator=g) for k in range(4)]
    pil = Image.fromarray((torch.rand(40, 72, 3, generator=g).numpy() * 255).astype(np.uint8))
    array = (torch.rand(64, 64, 3, generator=g).numpy() * 255).astype(np.uint8)
    return [*tensors, pil, array]


@pytest.fixture(scope="module")
def own_readings(ocr_dir, images):
    """The tiny model's own greedy reading of each image, one image per ``generate`` call,
    with transformers' classes and the processor's own OCR prompt."""
    from paco_reward.images import load_image

    model = AutoModelForImageTextToText.from_pretrained(ocr_dir).eval()
    processor = AutoProcessor.from_pretrained(ocr_dir)
    end_of_turn = processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
    readings = []
    for image in images:
        pil = load_image(image, "image")
        pixels = processor.image_processor(pil, return_tensors="pt")["pixel_values"]
        with torch.no_grad():
            features = model.get_image_features(pixel_values=pixels).pooler_output
        inputs = processor(images=pil, return_tensors="pt", num_image_tokens=features.shape[1])
        with torch.no_grad():
            out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS,
                                 eos_token_id=end_of_turn, pad_token_id=0)  # fmt: skip
        new = out[0, inputs["input_ids"].shape[1] :]
        readings.append(processor.tokenizer.decode(new, skip_special_tokens=True))
    return readings


def _quotable(text: str) -> str:
    return "".join(ch for ch in text if ch not in '"“”')


def test_the_reward_scores_the_tiny_models_own_reading_of_each_image(ocr_dir, images, own_readings):
    """Each image's reward is 1 - normalised distance (rapidfuzz) between the text its own
    prompt quotes and the model's own greedy reading of that image, in one batch and in
    several; a prompt without quoted text scores NaN with its reason."""
    readings = [_quotable(r) for r in own_readings]
    assert all(normalize_text(r) for r in readings), own_readings  # each read something
    assert len(set(readings)) >= 3, own_readings  # and the readings tell images apart
    first = readings[0]
    targets = [
        first,  # exactly what image 0 reads
        readings[1].upper() + "  ",  # case and spaces do not count
        readings[2][:-1] + ("x" if readings[2][-1] != "x" else "y"),  # one character off
        readings[4],  # another image's reading: image 3 must not be paired with it
        "Golden Harbor Bakery",
        None,  # no quoted text
    ]
    prompts = [f'A storefront sign that says "{t}"' if t else "A storefront" for t in targets]
    expected = [_expected_score(r, t) for r, t in zip(own_readings, targets[:-1])] + [np.nan]
    assert expected[:2] == [1.0, 1.0] and 0 < expected[2] < 1
    assert readings[3] == readings[4] or expected[3] < 1

    for batch_size, match in ((16, "contains"), (4, "exact")):
        reward = build_reward("ocr", model=str(ocr_dir), device="cpu", dtype="float32",
                              batch_size=batch_size, max_new_tokens=MAX_NEW_TOKENS,
                              match=match)  # fmt: skip
        assert reward.reader.read([]) == []
        scores = reward(images, prompts, [{}] * len(images))
        want = [_expected_score(r, t, match) for r, t in zip(own_readings, targets[:-1])]
        np.testing.assert_allclose(scores, want + [np.nan], rtol=0, atol=1e-12)
        assert reward.num_failed == 1
        (reason,) = reward.pop_failure_reasons()
        assert reason.startswith("images[5]: PromptError: no quoted text in 'A storefront'")
    # the async twin scores the same
    np.testing.assert_array_equal(asyncio.run(reward.acall(images, prompts, None)), scores)


def test_the_reward_loads_on_the_process_device_and_refuses_other_families(ocr_dir, tiny_model_dir):
    assert REWARDS["ocr"] is OCRReward and _takes_device(OCRReward)
    reward = build_reward("ocr", model=str(ocr_dir), device="cpu", dtype="float32")
    assert reward.device == torch.device("cpu")
    assert {p.device.type for p in reward.reader.model.parameters()} == {"cpu"}
    assert {p.dtype for p in reward.reader.model.parameters()} == {torch.float32}
    assert reward.reader.num_image_tokens == 4  # the tiny tower: 128 px / 16 -> 8 x 8 -> 2 x 2
    assert build_reward("ocr", model=str(ocr_dir), device="cpu").reader.dtype == torch.bfloat16
    with pytest.raises(UnsupportedModelError, match=r"'qwen2_5_vl' model; the ocr reward reads"):
        OCRReward(tiny_model_dir)  # an image-text-to-text model, but no OCR model
    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer; got 0"):
        OCRReward(ocr_dir, max_new_tokens=0)
    with pytest.raises(ValueError, match="match must be one of"):
        OCRReward(ocr_dir, match="substring")
    with pytest.raises(ValueError, match="dtype must be one of"):
        OCRReward(ocr_dir, dtype="float8")
    with pytest.raises(ValueError, match=r"does not accept the arguments \['model', 'revison'\]"):
        build_reward("ocr", model=str(ocr_dir), revison="v1")


def test_image_tokens_per_picture_are_those_the_vision_tower_makes(ocr_dir):
    """The reader's image-token count, from the vision config, is what the projector makes of
    a picture: 256 for the real GOT-OCR 2.0 (the processor's own default; built on the meta
    device from the shipped architecture), 4 for the tiny one."""
    from transformers import GotOcr2Processor

    from paco_grpo.rewards.ocr import _image_tokens
    from paco_reward.architectures import build_empty, model_config

    made = []
    for model in (build_empty(model_config("stepfun-ai/GOT-OCR-2.0-hf")),
                  AutoModelForImageTextToText.from_pretrained(ocr_dir)):  # fmt: skip
        side = model.config.vision_config.image_size
        weight = next(model.parameters())
        pixels = torch.zeros(1, 3, side, side, device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            made.append(model.get_image_features(pixel_values=pixels).pooler_output.shape[1])
        assert _image_tokens(model.config.vision_config) == made[-1]
    assert made == [GotOcr2Processor.num_image_tokens, 4] == [256, 4]


def test_hub_arguments_load_the_model_and_processor_of_one_revision(ocr_dir, tmp_path):
    """``revision`` (with ``cache_dir``, offline) reaches the model and its processor alike:
    the revision's weights and the revision's image processor, not main's."""
    import json

    from paco_reward.testing.hub_cache import install_in_hub_cache

    hub = tmp_path / "hub"
    v2 = build_tiny_got_ocr2(tmp_path / "v2", seed=1)
    install_in_hub_cache(ocr_dir, "acme/tiny-ocr", hub, "main")
    snapshot = install_in_hub_cache(v2, "acme/tiny-ocr", hub, "v2")
    preprocessor = snapshot / "processor_config.json"
    config = json.loads(preprocessor.read_text())
    config["image_processor"]["image_mean"] = [0.25, 0.5, 0.75]
    preprocessor.write_text(json.dumps(config))

    reader = OCRReward("acme/tiny-ocr", device="cpu", dtype="float32", revision="v2",
                       cache_dir=hub, local_files_only=True).reader  # fmt: skip
    assert list(reader.processor.image_processor.image_mean) == [0.25, 0.5, 0.75]
    ours, theirs = (reader.model.state_dict(),
                    AutoModelForImageTextToText.from_pretrained(v2).state_dict())  # fmt: skip
    assert ours.keys() == theirs.keys()
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=0)
    main = OCRReward("acme/tiny-ocr", device="cpu", dtype="float32", cache_dir=hub,
                     local_files_only=True).reader  # fmt: skip
    assert list(main.processor.image_processor.image_mean) != [0.25, 0.5, 0.75]


# ---------------------------------------------------------------- the tiny OCR recipe
TINY_RECIPE = "recipes/grpo_flux_ocr_tiny_cpu.yaml"


def test_the_tiny_ocr_recipe_trains_on_the_ocr_reward(ocr_dir, tmp_path, monkeypatch):
    """The shipped tiny recipe, its models built offline: two epochs on the generated prompts,
    every image scored by the tiny GOT-OCR 2.0 (no NaN, scores that differ within an epoch),
    every LoRA tensor moved, the held-out prompts evaluated at the test resolution."""
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.testing.flux import build_tiny_flux

    calls = []
    score = OCRReward.score

    def recorded(self, images, prompts, metadata):
        out = score(self, images, prompts, metadata)
        calls.append((len(images), [im.shape[-1] for im in images], list(prompts), out))
        return out

    monkeypatch.setattr(OCRReward, "score", recorded)
    recipe = GRPOConfig.from_yaml(TINY_RECIPE)
    reward_kwargs = {"ocr": {**recipe.reward_kwargs["ocr"], "model": str(ocr_dir)}}
    flux = build_tiny_flux(tmp_path / "flux", seed=0)
    cfg = GRPOConfig.from_yaml(TINY_RECIPE, {"model_name_or_path": str(flux),
                               "output_dir": str(tmp_path / "run"), "report_to": [],
                               "reward_kwargs": reward_kwargs})  # fmt: skip
    trainer = GRPOTrainer(cfg)
    before = [p.detach().clone() for p in trainer.params]
    history = trainer.train()

    assert [row["epoch"] for row in history] == [1, 2]
    for row in history:
        assert 0 <= row["reward/ocr/mean"] <= 1 and row["reward/ocr/num_nan"] == 0
        assert row["reward/ocr/std"] > 0  # the group's images were told apart
    assert 0 <= history[-1]["eval/reward/ocr/mean"] <= 1
    changed = [not torch.equal(a, b) for a, b in zip(before, trainer.params)]
    assert all(changed), f"{changed.count(False)} of {len(changed)} LoRA tensors never moved"

    train_prompts = set(Path("recipes/data/ocr_train.txt").read_text().splitlines())
    test_prompts = set(Path("recipes/data/ocr_test.txt").read_text().splitlines())
    sides = {side for _, shapes, _, _ in calls for side in shapes}
    assert sides == {cfg.train.resolution, cfg.test.resolution}
    for _, shapes, prompts, scores in calls:
        pool = train_prompts if shapes[0] == cfg.train.resolution else test_prompts
        assert set(prompts) <= pool and np.isfinite(scores).all()
    assert sum(n for n, shapes, _, _ in calls if shapes[0] == cfg.train.resolution) == 2 * 8
