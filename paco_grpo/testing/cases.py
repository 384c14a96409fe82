"""How the shared tests run a registered generator's tiny model: each tiny builder's module
says it beside the builder (``TEST_CASES``, by pipeline name), so a new model's tests come
with its builder and the tests parametrized over the registry pick it up.

    >>> from paco_grpo.testing.flux import TEST_CASES
    >>> TEST_CASES["flux"].recipe
    'recipes/grpo_tiny_cpu.yaml'
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PROMPTS", "ParityCase", "TinyCase"]

PROMPTS = ("a red fox in a 2x2 grid", "a blue bird")
"""Prompts of the parity calls (one of them where a batch of several rounds differently)."""


@dataclass(frozen=True)
class ParityCase:
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


@dataclass(frozen=True)
class TinyCase:
    """How the tests run one registered pipeline's tiny model.

    Attributes:
        recipe: its tiny CPU recipe.
        parity: the diffusers-parity call (see :class:`ParityCase`).
        resolution: a small image side its tiny VAE allows (the launch test trains at it).
        max_sequence_length: text tokens its tiny tokenizer needs for the recipes' prompts.
    """

    recipe: str
    parity: ParityCase
    resolution: int = 32
    max_sequence_length: int = 32
