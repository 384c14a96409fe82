"""The shipped architectures are the published models: built on the meta device through
the classes the trainer loads, their parameter counts match the published sizes within 1 %.

Published sizes: the parameter counts Hugging Face Hub shows for each model's safetensors
(FLUX.1-dev transformer 11.9 B and VAE 83.8 M, Qwen2.5-VL-7B-Instruct 8.29 B,
Qwen3-VL-8B-Instruct 8.77 B, Qwen-Image transformer 20.4 B), the T5 v1.1 XXL encoder's 4.76 B (FLUX.1-dev's text_encoder_2), and
GOT-OCR 2.0's 561 M (stepfun-ai/GOT-OCR-2.0-hf; its paper rounds to 580 M),
open_clip's model table for CLIP-ViT-H-14 (986.1 M) and ViT-L-14's text tower (123.65 M,
with its 0.59 M text projection that CLIPTextModel leaves out), Wan 2.1's VAE for Qwen-Image's
(127 M), Stable Diffusion 3.5 Large's 8.1 B transformer (its model card) with FLUX.1's VAE shape
(83.8 M) and open_clip's ViT-bigG-14 text tower (694.66 M, projection included, as
CLIPTextModelWithProjection builds it).
(127 M). FLUX.2: the transformers' 32 B (FLUX.2-dev) and 4 B (FLUX.2-klein, a rounded figure,
hence its 5 % tolerance), Mistral-Small-3.2-24B's 24.0 B and Qwen3-4B's 4.02 B as the Hub shows
them; the FLUX.2 VAE's 84.05 M is our count of diffusers' AutoencoderKLFlux2 defaults (the
layout BFL's checkpoint converts to), not a published figure. Z-Image-Turbo: its model card's
6 B transformer (a rounded figure, hence 5 %; we count 6.15 B), FLUX.1's VAE and Qwen3-4B.
"""

from __future__ import annotations

import json

import pytest

from paco_grpo.architectures import pipeline_configs, shipped_pipelines
from paco_reward.architectures import (
    MODELS,
    ArchitectureError,
    build_empty,
    count_parameters,
    model_config,
)

PUBLISHED = {
    ("black-forest-labs/FLUX.1-dev", "transformer"): 11.9e9,
    ("black-forest-labs/FLUX.1-dev", "vae"): 83.8e6,
    ("black-forest-labs/FLUX.1-dev", "text_encoder"): 123.65e6,
    ("black-forest-labs/FLUX.1-dev", "text_encoder_2"): 4.76e9,
    ("black-forest-labs/FLUX.1-Kontext-dev", "transformer"): 11.9e9,
    ("black-forest-labs/FLUX.1-Kontext-dev", "vae"): 83.8e6,
    ("black-forest-labs/FLUX.1-Kontext-dev", "text_encoder"): 123.65e6,
    ("black-forest-labs/FLUX.1-Kontext-dev", "text_encoder_2"): 4.76e9,
    ("Qwen/Qwen-Image", "transformer"): 20.4e9,
    ("Qwen/Qwen-Image", "vae"): 127e6,
    ("Qwen/Qwen-Image", "text_encoder"): 8.29e9,
    ("Qwen/Qwen-Image-Edit", "transformer"): 20.4e9,
    ("Qwen/Qwen-Image-Edit", "vae"): 127e6,
    ("Qwen/Qwen-Image-Edit", "text_encoder"): 8.29e9,
    ("Qwen/Qwen-Image-Edit-2509", "transformer"): 20.4e9,
    ("Qwen/Qwen-Image-Edit-2509", "vae"): 127e6,
    ("Qwen/Qwen-Image-Edit-2509", "text_encoder"): 8.29e9,
    ("stabilityai/stable-diffusion-3.5-large", "transformer"): 8.1e9,
    ("stabilityai/stable-diffusion-3.5-large", "vae"): 83.8e6,
    ("stabilityai/stable-diffusion-3.5-large", "text_encoder"): 123.65e6,
    ("stabilityai/stable-diffusion-3.5-large", "text_encoder_2"): 694.66e6,
    ("stabilityai/stable-diffusion-3.5-large", "text_encoder_3"): 4.76e9,
    ("black-forest-labs/FLUX.2-dev", "transformer"): 32e9,
    ("black-forest-labs/FLUX.2-dev", "vae"): 84.05e6,
    ("black-forest-labs/FLUX.2-dev", "text_encoder"): 24.0e9,
    ("black-forest-labs/FLUX.2-klein-4B", "transformer"): 4e9,
    ("black-forest-labs/FLUX.2-klein-4B", "vae"): 84.05e6,
    ("black-forest-labs/FLUX.2-klein-4B", "text_encoder"): 4.02e9,
    ("black-forest-labs/FLUX.2-klein-base-4B", "transformer"): 4e9,
    ("black-forest-labs/FLUX.2-klein-base-4B", "vae"): 84.05e6,
    ("black-forest-labs/FLUX.2-klein-base-4B", "text_encoder"): 4.02e9,
    ("Tongyi-MAI/Z-Image-Turbo", "transformer"): 6e9,
    ("Tongyi-MAI/Z-Image-Turbo", "vae"): 83.8e6,
    ("Tongyi-MAI/Z-Image-Turbo", "text_encoder"): 4.02e9,
    ("X-GenGroup/PaCo-Reward-7B", None): 8.29e9,
    ("Qwen/Qwen2.5-VL-7B-Instruct", None): 8.29e9,
    ("Qwen/Qwen3-VL-8B-Instruct", None): 8.77e9,
    ("laion/CLIP-ViT-H-14-laion2B-s32B-b79K", None): 986.1e6,
    ("yuvalkirstain/PickScore_v1", None): 986.1e6,
    ("stepfun-ai/GOT-OCR-2.0-hf", None): 561e6,
}


def test_every_shipped_model_has_a_published_size():
    shipped = {(m, None) for m in MODELS}
    shipped |= {(p, c) for p, components in shipped_pipelines().items() for c in components}
    assert shipped == set(PUBLISHED)


@pytest.mark.parametrize("model, component", sorted(PUBLISHED, key=str))
def test_parameter_count_matches_the_published_size(model, component):
    config = pipeline_configs(model)[component] if component else model_config(model)
    built = build_empty(config)
    assert {p.device.type for p in built.parameters()} == {"meta"}  # nothing allocated
    expected = PUBLISHED[(model, component)]
    rounded = ("FLUX.2-klein", "Z-Image")  # published as "4 B" and "6 B"
    rel = 0.05 if any(r in model for r in rounded) and component == "transformer" else 0.01
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
