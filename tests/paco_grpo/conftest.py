"""The test registration of every generator: what the registry-wide tests
(``test_grpo_pipelines.py``, ``test_grpo_launch.py``) need beyond the pipeline's
:class:`~paco_grpo.pipelines.PipelineSpec`. A new model adds one line to :data:`TINY`; the
tests parametrized over the registry then cover it."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from paco_grpo.pipelines import get_pipeline_spec


@dataclass(frozen=True)
class Tiny:
    """How the tests run one registered pipeline's tiny model.

    Attributes:
        recipe: its tiny CPU recipe.
        resolution: a small image side its tiny VAE allows (the launch test trains at it).
        max_sequence_length: text tokens its tiny tokenizer needs for the recipes' prompts.
        parity: the diffusers-parity call (see :class:`Parity`).
    """

    recipe: str
    parity: Parity
    resolution: int = 32
    max_sequence_length: int = 32


@dataclass(frozen=True)
class Parity:
    """One call of the diffusers pipeline and the same call of the sampler, which must return
    the same images at ``noise_level = 0``.

    Attributes:
        prompts: the prompts; each is sampled ``copies`` times (diffusers'
            ``num_images_per_prompt``).
        size: ``(height, width)`` in pixels.
        guidance_scale: the sampler's ``guidance_scale``.
        diffusers: the diffusers call's own keyword arguments (its guidance among them).
        sampler: the sampler's constructor arguments.
        references: editing pipelines: ``(width, height)`` of each reference image (random
            pixels), given to both; ``area``: the sampler's (diffusers resizes by itself).
    """

    prompts: tuple[str, ...]
    size: tuple[int, int]
    guidance_scale: float
    diffusers: dict = field(default_factory=dict)
    sampler: dict = field(default_factory=dict)
    copies: int = 2
    references: tuple[tuple[int, int], ...] = ()
    area: int | None = None


PROMPTS = ("a red fox in a 2x2 grid", "a blue bird")
TINY = {
    "flux": Tiny(
        "recipes/grpo_tiny_cpu.yaml",
        Parity(PROMPTS, (64, 96), 3.5, {"guidance_scale": 3.5, "max_sequence_length": 32},
               {"max_sequence_length": 32}),
    ),
    "flux2": Tiny(
        "recipes/grpo_flux2_tiny_cpu.yaml",
        Parity(PROMPTS, (64, 96), 3.5, {"guidance_scale": 3.5, "max_sequence_length": 48},
               {"max_sequence_length": 48}),
    ),
    "flux2_klein": Tiny(  # a base klein: true CFG against the empty prompt
        "recipes/grpo_flux2_klein_tiny_cpu.yaml",
        Parity(PROMPTS, (64, 96), 4.0, {"guidance_scale": 4.0, "max_sequence_length": 48},
               {"max_sequence_length": 48}),
    ),
    "flux_kontext": Tiny(
        "recipes/grpo_kontext_tiny_cpu.yaml",
        Parity(("make the sky pink",), (48, 80), 2.5,
               {"guidance_scale": 2.5, "max_sequence_length": 32, "max_area": 48 * 80,
                "_auto_resize": False},
               {"max_sequence_length": 32}, references=((80, 48),)),
    ),
    # one prompt: Qwen2.5-VL's padded batch rounds differently from one prompt alone
    "qwen_image": Tiny(
        "recipes/grpo_qwen_image_tiny_cpu.yaml",
        Parity(PROMPTS[:1], (32, 48), 4.0, {"negative_prompt": " ", "true_cfg_scale": 4.0},
               {"negative_prompt": " "}),
        max_sequence_length=64,  # the tiny tokenizer spends ~48 tokens on the prompt template
    ),
    # diffusers resizes the reference to 1024^2 px area whatever the output size
    "qwen_image_edit": Tiny(
        "recipes/grpo_qwen_image_edit_tiny_cpu.yaml",
        Parity(("make it red",), (128, 128), 4.0,
               {"negative_prompt": " ", "true_cfg_scale": 4.0}, {"negative_prompt": " "},
               references=((64, 64),), area=1024 * 1024),
        resolution=64,  # its tiny VAE downsamples 32x
    ),
    # one prompt (diffusers' limit); references at the VAE size, so that both resize them to
    # their ~384^2 px condition size from the same pixels
    "qwen_image_edit_plus": Tiny(
        "recipes/grpo_qwen_image_edit_plus_tiny_cpu.yaml",
        Parity(("put the cat of picture 2 on the sofa of picture 1",), (128, 128), 4.0,
               {"negative_prompt": " ", "true_cfg_scale": 4.0}, {"negative_prompt": " "},
               references=((1024, 1024), (1024, 1024))),
        resolution=64,  # its tiny VAE downsamples 32x
    ),
    # one prompt: SD3's CLIP projections round differently in a batch of other prompts
    "sd3": Tiny(
        "recipes/grpo_sd35_tiny_cpu.yaml",
        Parity(PROMPTS[:1], (64, 96), 4.5, {"guidance_scale": 4.5, "max_sequence_length": 32},
               {"max_sequence_length": 32}, copies=3),
    ),
    # CFG (above a guidance of 0) against the empty prompt, as the pipeline's default
    "z_image": Tiny(
        "recipes/grpo_zimage_tiny_cpu.yaml",
        Parity(PROMPTS[:1], (32, 48), 4.0, {"guidance_scale": 4.0, "max_sequence_length": 64},
               {"max_sequence_length": 64}),
        max_sequence_length=64,
    ),
}  # fmt: skip


@pytest.fixture(scope="session")
def tiny_pipeline_dir(tmp_path_factory):
    """``tiny_pipeline_dir(name)``: the folder of pipeline ``name``'s tiny model (its spec's
    tiny builder, seed 0), built once per session on first use."""
    root = tmp_path_factory.mktemp("tiny-pipelines")

    @functools.cache
    def build(name: str) -> Path:
        return get_pipeline_spec(name).build_tiny(root / name, seed=0)

    return build


@pytest.fixture(scope="session")
def tiny() -> dict[str, Tiny]:
    """Pipeline name -> its :class:`Tiny` registration (:data:`TINY`)."""
    return TINY
