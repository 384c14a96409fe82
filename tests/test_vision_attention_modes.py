"""What the Qwen-VL scorer does with a model that is not the one it was checked against, or
that changes after loading.

* ``vision_attention="auto"`` groups the vision attention only when the class's forward is
  the checked code (a fingerprint of its source): a subclass in transformers' own modeling
  module with the same attributes and parameters but other code (here: half the output) keeps
  its forward, with one warning, and scores as transformers' own forward of that model;
  ``"grouped"`` refuses it with ``VisionAttentionError``; ``"stock"`` never groups.
* An instance whose attention already has a ``forward`` of its own (a hook) keeps it.
* A model whose tower the scorer refuses (GLM-4V: the checked attention, an unknown tower) is
  left unpatched.
* ``model.set_attn_implementation("eager")`` after construction: the padding mask is eager's
  (sdpa's boolean one, which eager adds to its scores, changed the scores by 0.2), and the
  vision boundaries go where the new implementation reads them.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import transformers
from transformers import AutoModelForImageTextToText

from paco_reward import InputError, PacoReward, VisionAttentionError
from paco_reward.images import resize_for_model
from paco_reward.local_backend import LocalBackend
from paco_reward.modeling import load_evaluator_model_and_processor
from paco_reward.templates import render_instruction
from paco_reward.vision_attention import (
    CHECKED_FORWARDS,
    CHECKED_TRANSFORMERS,
    forward_fingerprint,
    vision_attention_modules,
)
from tests.test_modeling import DirectScorer

# Instructions of three lengths: a chunk of the three pairs is left-padded.
THEMES = ("a red fox", "the same knight rides through four seasons in a misty valley", "a fox")


def _halved(cls: type) -> type:
    """A subclass of ``cls`` in ``cls``'s own modeling module, with ``cls``'s attributes and
    forward parameters, whose forward halves ``cls``'s output: only its code differs."""

    def forward(self, hidden_states, cu_seqlens, position_embeddings=None, max_seqlen=None,
                **kwargs):  # fmt: skip
        return 0.5 * cls.forward(
            self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs
        )

    return type(f"Halved{cls.__name__}", (cls,), {"forward": forward, "__module__": cls.__module__})


def _halve_vision_attention(model) -> str:
    modules = vision_attention_modules(model)
    halved = _halved(type(modules[0]))
    for module in modules:
        module.__class__ = halved
    return halved.__name__


def _own_forwards(model) -> list:
    return [vars(m).get("forward") for m in vision_attention_modules(model)]


def _pairs(random_images, backend):
    images = [resize_for_model(i, backend.image_policy) for i in random_images(3, (56, 56), 5)]
    texts = [render_instruction("consistency", theme) for theme in THEMES]
    return images, [(0, 1, texts[0]), (1, 2, texts[1]), (2, 0, texts[2])]


def _direct(folder, model, images, pairs) -> np.ndarray:
    direct = DirectScorer(folder)
    direct.model = model.eval()
    return np.array([direct.score(images[a], images[b], text) for a, b, text in pairs])


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "paco_reward.vision_attention"]


def test_auto_keeps_a_forward_whose_code_differs_and_scores_as_transformers(
    tiny_model_dir, random_images, caplog
):
    model, processor = load_evaluator_model_and_processor(tiny_model_dir)
    name = _halve_vision_attention(model)
    with caplog.at_level(logging.WARNING, logger="paco_reward.vision_attention"):
        backend = LocalBackend(model, processor, batch_size=3, canonical_yes_no=False)
    (warning,) = _warnings(caplog)  # one for the model, not one per module
    assert name in warning and f"transformers {transformers.__version__}" in warning
    assert not backend.grouped_vision_attention
    assert _own_forwards(model) == [None] * len(_own_forwards(model))

    images, pairs = _pairs(random_images, backend)
    ours = backend.score_batch(images, pairs)
    reference = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    _halve_vision_attention(reference)
    expected = _direct(tiny_model_dir, reference, images, pairs)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-6)
    # the halving shows: the unpatched model scores otherwise
    unpatched = _direct(tiny_model_dir, AutoModelForImageTextToText.from_pretrained(tiny_model_dir), images, pairs)  # fmt: skip
    assert np.abs(unpatched - expected).max() > 1e-4


def test_grouped_refuses_a_forward_it_was_not_checked_against(tiny_model_dir):
    model, processor = load_evaluator_model_and_processor(tiny_model_dir)
    name = _halve_vision_attention(model)
    with pytest.raises(VisionAttentionError, match=rf"{name} \(transformers .*not the code"):
        LocalBackend(model, processor, vision_attention="grouped")
    assert _own_forwards(model) == [None] * len(_own_forwards(model))  # nothing changed


def test_the_installed_forward_is_a_checked_one(tiny_model_dir):
    """Within the checked releases, the installed Qwen-VL forwards are the checked code (the
    fingerprint is of the code: comments and formatting do not count)."""
    from packaging.specifiers import SpecifierSet
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLVisionAttention
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionAttention

    if transformers.__version__ not in SpecifierSet(CHECKED_TRANSFORMERS):
        pytest.skip(f"transformers {transformers.__version__} is not a checked release")
    for cls in (Qwen2_5_VLVisionAttention, Qwen3VLVisionAttention):
        assert forward_fingerprint(cls.forward) in CHECKED_FORWARDS
    assert forward_fingerprint(_halved(Qwen2_5_VLVisionAttention).forward) not in CHECKED_FORWARDS


def test_stock_and_auto_score_the_same_and_a_bad_mode_fails_first(tiny_model_dir, random_images):
    stock = PacoReward.from_pretrained(tiny_model_dir, vision_attention="stock")
    grouped = PacoReward.from_pretrained(tiny_model_dir, vision_attention="grouped")
    assert not stock.backend.grouped_vision_attention and grouped.backend.grouped_vision_attention
    assert _own_forwards(stock.backend.model) == [None] * len(_own_forwards(stock.backend.model))
    images, pairs = _pairs(random_images, stock.backend)
    np.testing.assert_allclose(
        stock.backend.score_batch(images, pairs),
        grouped.backend.score_batch(images, pairs),
        rtol=0,
        atol=1e-6,
    )
    with pytest.raises(InputError, match="vision_attention must be one of"):
        PacoReward.from_pretrained("no/such-model", vision_attention="fast")


def test_an_instance_forward_of_its_own_is_kept(tiny_model_dir, random_images, caplog):
    """A hook's instance-level forward (accelerate's, a user's) is not overwritten: ``auto``
    keeps it with a warning and it runs, ``grouped`` refuses."""
    model, processor = load_evaluator_model_and_processor(tiny_model_dir)
    calls = []

    def hooked(module):
        original = module.forward

        def forward(*args, **kwargs):
            calls.append(module)
            return original(*args, **kwargs)

        return forward

    modules = vision_attention_modules(model)
    for module in modules:
        module.forward = hooked(module)
    own = _own_forwards(model)
    with caplog.at_level(logging.WARNING, logger="paco_reward.vision_attention"):
        backend = LocalBackend(model, processor)
    assert "a forward of its own" in _warnings(caplog)[0]
    assert _own_forwards(model) == own
    images, pairs = _pairs(random_images, backend)
    backend.score_batch(images, pairs[:1])
    assert set(map(id, calls)) == set(map(id, modules))
    with pytest.raises(VisionAttentionError, match="a forward of its own"):
        LocalBackend(model, processor, vision_attention="grouped")
    assert _own_forwards(model) == own


def test_a_refused_model_is_left_unpatched(tiny_glm4v_dir):
    """GLM-4V's vision attention is the checked code, its tower not one the scorer knows:
    the refusal comes before any module changes."""
    model, processor = load_evaluator_model_and_processor(tiny_glm4v_dir)
    with pytest.raises(VisionAttentionError, match="Glm4vVisionModel"):
        LocalBackend(model, processor)
    assert _own_forwards(model) == [None] * len(_own_forwards(model))


def test_scores_after_set_attn_implementation_eager_are_eager_transformers(
    tiny_model_dir, random_images
):
    backend = LocalBackend(
        *load_evaluator_model_and_processor(tiny_model_dir), batch_size=3, canonical_yes_no=False
    )
    backend.model.set_attn_implementation("eager")
    images, pairs = _pairs(random_images, backend)
    ours = backend.score_batch(images, pairs)
    eager = AutoModelForImageTextToText.from_pretrained(tiny_model_dir, attn_implementation="eager")
    np.testing.assert_allclose(ours, _direct(tiny_model_dir, eager, images, pairs), rtol=0, atol=1e-6)  # fmt: skip


def test_the_vision_boundaries_follow_the_attention_implementation(tiny_model_dir):
    backend = LocalBackend(*load_evaluator_model_and_processor(tiny_model_dir))
    assert backend.vision_inputs.boundaries_device is None  # sdpa: on the host
    backend.model.model.visual.config._attn_implementation = "flash_attention_2"
    assert backend.vision_inputs.boundaries_device == torch.device("cpu")  # varlen kernels


def test_the_commands_that_score_take_vision_attention():
    from paco_reward.cli import MergeArguments, ScoreArguments, ServeArguments

    serve = ServeArguments(model=["a", "b"], vision_attention="stock")
    assert [kwargs["vision_attention"] for _, _, kwargs in serve.models()] == ["stock", "stock"]
    score = ScoreArguments(model="a", images=["x.png", "y.png"], prompt="a fox", vision_attention="grouped")
    assert score.load_kwargs()["vision_attention"] == "grouped"
    assert ServeArguments(model=["a"]).models()[0][2]["vision_attention"] == "auto"
    assert "vision_attention" not in MergeArguments(model="a", adapter="b", output_dir="c").load_kwargs()  # fmt: skip
