"""The stand-in pretraining of the tiny VLM (paco_reward.testing.standin)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from paco_reward import PacoReward
from paco_reward.errors import ConfigError
from paco_reward.testing.standin import (
    DescribeCollator,
    StandInConfig,
    clause_accuracy,
    description_loss,
    expand_text_layers,
    pretrain_describer,
    read_standin_info,
)


def _colour_example(rng: random.Random):
    """A flat colour image and its name: learnable in a few dozen steps."""
    name, rgb = rng.choice([("red", (220, 30, 30)), ("blue", (30, 30, 220))])
    return np.full((56, 56, 3), rgb, np.uint8), f"Colour {name}."


def test_description_loss_is_the_models_own_causal_lm_loss(tiny_model_dir):
    """Computing logits only from the description on gives the loss transformers computes
    from the full logits and the labels (its ForCausalLMLoss)."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_model_dir)
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    rng = random.Random(0)
    batch = DescribeCollator(processor, "Describe the image.", 56 * 56)(
        [_colour_example(rng) for _ in range(3)]
    )
    with torch.no_grad():
        reference = model(**batch, use_cache=False).loss
        ours = description_loss(model, batch)
    assert float(ours) == pytest.approx(float(reference), rel=1e-5)


def test_clause_accuracy_counts_clauses_in_place():
    scores = clause_accuracy(
        ["Shape circle, colour red, marking dots.", "Shape square, colour blue."],
        ["Shape circle, colour blue, marking dots.", "Shape square, colour blue, marking cross."],
    )
    assert scores == {"exact": 0.0, "shape": 1.0, "colour": 0.5, "marking": 0.5}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"steps": 0}, "steps"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"steps": 10, "warmup_steps": 10}, "warmup_steps"),
        ({"eval_examples": -1}, "eval_examples"),
        ({"expand_text_layers": -1}, "expand_text_layers"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        StandInConfig(**kwargs)


def test_pretraining_learns_descriptions_and_is_cached(tmp_path):
    """A few dozen steps teach the tiny model to name a flat colour; the folder loads with
    PacoReward; a second call with the same configuration reuses it, a different one
    trains again."""
    config = StandInConfig(
        steps=60, batch_size=8, learning_rate=3e-3, warmup_steps=5, eval_examples=16
    )
    out = pretrain_describer(
        tmp_path / "standin", _colour_example, config, data_id="colours", progress=False
    )
    info = read_standin_info(out)
    assert info["readout_accuracy"]["colour"] == 1.0, info["readout_accuracy"]
    assert info["final_loss"] < info["loss_every_25_steps"][0] / 10
    blank = np.zeros((56, 56, 3), np.uint8)
    assert 0.0 <= PacoReward.from_pretrained(out).score(blank, blank, template="rank") <= 1.0
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert pretrain_describer(out, _colour_example, config, data_id="colours") == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    other = StandInConfig(steps=2, batch_size=2, warmup_steps=1, eval_examples=0)
    pretrain_describer(out, _colour_example, other, data_id="colours", progress=False)
    assert json.loads((out / "standin.json").read_text())["config"]["steps"] == 2
    assert not (tmp_path / "standin.partial").exists()


def test_expanded_model_computes_what_the_original_does_and_its_new_layers_learn(
    tiny_model_dir, tmp_path
):
    """Block expansion: two appended layers leave every logit (images and text) as it was,
    survive save/from_pretrained, and receive gradients (their zeroed projections train)."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_model_dir)
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    batch = DescribeCollator(processor, "Describe the image.", 56 * 56)(
        [_colour_example(random.Random(k)) for k in range(3)]
    )
    with torch.no_grad():
        before = model(**batch, use_cache=False).logits
    layers = model.config.text_config.num_hidden_layers
    expanded = expand_text_layers(model, 2)
    expanded.save_pretrained(tmp_path / "expanded")
    loaded = Qwen2_5_VLForConditionalGeneration.from_pretrained(tmp_path / "expanded")
    assert loaded.config.text_config.num_hidden_layers == layers + 2
    with torch.no_grad():
        after = loaded(**batch, use_cache=False).logits
    torch.testing.assert_close(after, before, rtol=0, atol=1e-5)
    loaded.train()
    description_loss(loaded, batch).backward()
    new = loaded.model.language_model.layers[layers]
    assert new.self_attn.o_proj.weight.grad.abs().sum() > 0
    assert new.mlp.down_proj.weight.grad.abs().sum() > 0
