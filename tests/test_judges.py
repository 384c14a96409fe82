"""The judge registry: each family recognised from its config, its backend decided before
any weight loads. GLM-4V (Qwen-VL's image processing, a vision tower the Qwen-VL scorer does
not know), which the Qwen-VL scorer loaded, patched and then refused, scores through
``ProcessorBackend``, equal to its own forward; Qwen2.5-VL, Qwen3-VL and Gemma-3 are routed as
before."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForImageTextToText

from paco_reward import PacoReward, VisionAttentionError
from paco_reward.architectures import MODELS, build_empty, count_parameters, model_config
from paco_reward.judges import JUDGE_SPECS, backend_for_config, judge_spec_for_config, resolve
from paco_reward.local_backend import LocalBackend
from paco_reward.processor_backend import ProcessorBackend
from paco_reward.templates import render_instruction
from paco_reward.transformers_backend import TransformersBackend, backend_class_for
from tests.test_architectures import PUBLISHED
from tests.test_modeling import DirectScorer

# Judge family -> the fixture of its tiny folder.
TINY = {
    "qwen2_5_vl": "tiny_model_dir",
    "qwen3_vl": "tiny_qwen3_vl_dir",
    "gemma3": "tiny_gemma3_dir",
    "glm4v": "tiny_glm4v_dir",
}
ROUTED = {
    "qwen2_5_vl": LocalBackend,
    "qwen3_vl": LocalBackend,
    "gemma3": ProcessorBackend,
    "glm4v": ProcessorBackend,
}


def test_glm4v_scores_through_processor_backend_equal_to_its_own_forward(
    tiny_glm4v_dir, random_images
):
    rm = PacoReward.from_pretrained(tiny_glm4v_dir, canonical_yes_no=False, batch_size=3)
    assert type(rm.backend) is ProcessorBackend
    images = random_images(2, (56, 56), 1) + random_images(1, (84, 56), 2)
    themes = ["a red fox", "the same knight rides through four seasons", "a fox"]
    pairs = [(images[0], images[1], themes[0]), (images[1], images[2], themes[1]),
             (images[2], images[0], themes[2])]  # fmt: skip
    ours = rm.score_pairs(pairs)
    direct = DirectScorer(tiny_glm4v_dir)  # P(Yes) of model(**processor(text, images))
    expected = np.array(
        [direct.score(a, b, render_instruction("consistency", t)) for a, b, t in pairs]
    )
    assert np.ptp(expected) > 1e-3, expected  # the pairs really differ
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("family", sorted(TINY))
def test_each_family_is_routed_from_its_config(family, request):
    folder = request.getfixturevalue(TINY[family])
    config = AutoConfig.from_pretrained(folder)
    spec = judge_spec_for_config(config)
    assert spec is JUDGE_SPECS[family]
    assert backend_class_for(config) is ROUTED[family]
    # the tower the spec names is the one transformers builds for the config (no weights)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    assert spec.vision_tower in {type(m).__name__ for m in model.modules()}
    assert callable(resolve(spec.tiny_builder))


def test_the_backend_is_decided_before_any_weight_loads(tiny_glm4v_dir, monkeypatch):
    import paco_reward.transformers_backend as transformers_backend

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(transformers_backend, "load_vision_language_model", no_weights)
    with pytest.raises(VisionAttentionError, match="'glm4v' model.*Glm4vVisionModel"):
        LocalBackend.from_pretrained(tiny_glm4v_dir)
    with pytest.raises(VisionAttentionError, match="vision_attention='grouped'"):
        TransformersBackend.from_pretrained(tiny_glm4v_dir, vision_attention="grouped")


def test_a_family_no_spec_names_goes_to_processor_backend():
    assert judge_spec_for_config({"model_type": "paddleocr_vl"}) is None
    assert resolve(backend_for_config({"model_type": "paddleocr_vl"})) is ProcessorBackend
    # every tower LocalBackend knows has a family, routed to it
    from paco_reward.host_inputs import _TOWER_INPUTS

    local = {s.vision_tower for s in JUDGE_SPECS.values() if s.backend.endswith(":LocalBackend")}
    assert local == set(_TOWER_INPUTS)


@pytest.mark.parametrize(
    "name", [name for name, spec in JUDGE_SPECS.items() if spec.published], ids=str
)
def test_published_models_and_shrunk_architectures(name):
    """Each published model of a family ships its architecture, of that family (its size is
    checked by tests/test_architectures.py); the family's shrink function builds a smaller one."""
    spec = JUDGE_SPECS[name]
    for hub in spec.published:
        assert hub in MODELS and (hub, None) in PUBLISHED
        config = model_config(hub)
        assert judge_spec_for_config(config) is spec
    small = spec.shrunk(config, 0.125)
    assert judge_spec_for_config(small) is spec
    assert count_parameters(build_empty(small)) < min(spec.published.values()) / 10
