"""The shipped architectures are the published models: built on the meta device through
the classes the trainer loads, their parameter counts match the published sizes within 1 %.

The pipelines' files: the sizes and sources beside them, ``paco_grpo/architectures/
published_sizes.json`` (one entry per shipped file, rounded figures with a wider tolerance).
The evaluators' and rewards' models: the parameter counts Hugging Face Hub shows for each
model's safetensors (Qwen2.5-VL-7B-Instruct 8.29 B, Qwen3-VL-8B-Instruct 8.77 B, Gemma-3-4B-IT
4.30 B), GOT-OCR 2.0's 561 M (stepfun-ai/GOT-OCR-2.0-hf; its paper rounds to 580 M) and
open_clip's model table for CLIP-ViT-H-14 (986.1 M).
"""

from __future__ import annotations

import json

import pytest

from paco_grpo.architectures import SHIPPED, pipeline_configs, shipped_pipelines
from paco_reward.architectures import (
    MODELS,
    ArchitectureError,
    build_empty,
    count_parameters,
    model_config,
)
from paco_reward.judges import JUDGE_SPECS

# The judges' sizes are their registry entries' (paco_reward.judges.JUDGE_SPECS: published).
PUBLISHED = {
    **{(hub, None): size for spec in JUDGE_SPECS.values() for hub, size in spec.published.items()},
    ("laion/CLIP-ViT-H-14-laion2B-s32B-b79K", None): 986.1e6,
    ("yuvalkirstain/PickScore_v1", None): 986.1e6,
    ("stepfun-ai/GOT-OCR-2.0-hf", None): 561e6,
    # VQAScore's CLIP-FlanT5: FlanT5-XXL's 11.14 B (T5 v1.1 XXL with its own head: the 4.76 B
    # encoder above, the decoder, the 32,128 x 4,096 head), CLIP ViT-L/14-336's vision tower
    # (303.5 M: open_clip's ViT-L-14 visual tower less its projection, at 577 positions) and the
    # mlp2x_gelu projector (21.0 M); a sum of parts, not a figure the Hub shows for the repo.
    ("zhiqiulin/clip-flant5-xxl", None): 11.135e9 + 303.5e6 + 21.0e6,
    # the aesthetic predictor's CLIP: 428 M on the Hub
    ("openai/clip-vit-large-patch14", None): 428e6,
    # GARDO's feature model: DINOv3's paper gives ViT-L/16 as 300 M (rounded, hence 2 %)
    ("facebook/dinov3-vitl16-pretrain-lvd1689m", None): 300e6,
}
# Published figures rounded further than 1 %: their tolerance.
ROUNDED = {("facebook/dinov3-vitl16-pretrain-lvd1689m", None): 0.02}


# The pipelines' published sizes, beside their architecture files: file -> size, source.
PIPELINE_SIZES = json.loads((SHIPPED / "published_sizes.json").read_text())
PIPELINE_FILES = {
    (model, component): file
    for model, files in shipped_pipelines().items()
    for component, file in files.items()
}


def test_every_shipped_model_has_a_published_size():
    assert {(m, None) for m in MODELS} == set(PUBLISHED)
    assert set(PIPELINE_FILES.values()) == set(PIPELINE_SIZES)  # one entry per file, no stale one
    assert all(entry["source"] for entry in PIPELINE_SIZES.values())


@pytest.mark.parametrize("model, component", sorted(PUBLISHED, key=str) + sorted(PIPELINE_FILES))
def test_parameter_count_matches_the_published_size(model, component):
    config = pipeline_configs(model)[component] if component else model_config(model)
    built = build_empty(config)
    assert {p.device.type for p in built.parameters()} == {"meta"}  # nothing allocated
    if component is None:
        expected, rel = PUBLISHED[(model, None)], ROUNDED.get((model, None), 0.01)
    else:
        entry = PIPELINE_SIZES[PIPELINE_FILES[(model, component)]]
        expected, rel = entry["parameters"], entry.get("tolerance", 0.01)
    assert count_parameters(built) == pytest.approx(expected, rel=rel)


def test_a_local_folder_wins_over_the_shipped_file(tmp_path):
    config = {**model_config("X-GenGroup/PaCo-Reward-7B"), "num_hidden_layers": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert model_config(tmp_path)["num_hidden_layers"] == 2
    (tmp_path / "model_index.json").write_text(json.dumps({"transformer": ["diffusers", "X"]}))
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / "config.json").write_text(json.dumps({"_class_name": "X"}))
    assert pipeline_configs(tmp_path) == {"transformer": {"_class_name": "X"}}


def test_an_unknown_model_names_itself_and_the_way_out():
    with pytest.raises(ArchitectureError, match=r"'org/unknown'.*local folder"):
        model_config("org/unknown")
    with pytest.raises(ArchitectureError, match=r"'org/unknown-pipe'.*model_index.json"):
        pipeline_configs("org/unknown-pipe")
