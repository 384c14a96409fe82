"""Recipe names -> policy pipelines: the one place a generator's knowledge lives.

Each model file of :mod:`paco_grpo.pipelines` ends with a :func:`register_pipeline` call;
``GRPOConfig.pipeline`` must be one of the registered names, and the shared code asks the
:class:`PipelineSpec`: the policy (:mod:`paco_grpo.policy`) loads, checks and samples the
pipeline through it, ``GRPOConfig`` takes its default LoRA targets, ``paco-grpo plan`` its
architectures and its sampler's transformer inputs, ``paco-grpo tiny-<name>`` its tiny
builder and ``benchmarks.gpu_check`` its scheduler and its sampler's text shapes. Nothing
else names a model.

    >>> from paco_grpo.pipelines import get_pipeline_spec
    >>> spec = get_pipeline_spec("qwen_image")
    >>> spec.diffusers_class, spec.edits, spec.true_cfg
    ('QwenImagePipeline', False, True)
    >>> spec.runs_true_cfg(4.0), spec.runs_true_cfg(1.0)
    (True, False)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_reward.errors import InputError

__all__ = ["PIPELINE_SPECS", "PipelineSpec", "get_pipeline_spec", "register_pipeline"]

# Joint-attention projections of the MMDiT blocks of FLUX.1, FLUX.2, SD3 and Qwen-Image (image
# stream, then text stream): the LoRA targets the models' default lists share.
JOINT_ATTENTION_LORA_TARGETS = (
    "attn.to_k",
    "attn.to_q",
    "attn.to_v",
    "attn.to_out.0",
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
)


@dataclass(frozen=True)
class PipelineSpec:
    """Everything shared code needs to know about one generator.

    Attributes:
        name: the recipe's ``pipeline:`` value.
        sampler: the :class:`~paco_grpo.pipelines.sampling.GRPOSampler` subclass, built as
            ``sampler(pipe, **{k: getattr(config, k) for k in config_kwargs})``; what shared
            code needs of the model's code is on it too (``meta_inputs``: the transformer's
            call on the meta device, for ``paco-grpo plan``; ``text_shapes``: what its text
            encoder returns, which ``benchmarks.gpu_check`` fakes).
        diffusers_class: the diffusers pipeline class ``model_name_or_path`` loads with
            (``getattr(diffusers, diffusers_class).from_pretrained``); a pipeline passed to
            the trainer must be one (or a subclass).
        lora_target_modules: the transformer's module-name suffixes that get LoRA when a
            recipe names none (``GRPOConfig.lora_target_modules`` left out).
        tiny_builder: ``"module:function"`` of the tiny offline builder,
            ``function(output_dir, seed=0) -> Path`` (``paco-grpo tiny-<name>``).
        architectures: hub id -> component -> shipped configuration file (under
            ``paco_grpo/architectures/``; ``reward:<file>`` under ``paco_reward``'s): the real
            models ``paco-grpo plan`` builds on the meta device. Tokenizers and schedulers
            have no weights and are not listed.
        scheduler_config: the real model's ``scheduler_config.json`` (the tiny builders and
            ``benchmarks.gpu_check`` build its scheduler).
        edits: whether the policy edits reference images per prompt: its prompt files are
            (prompt, image) parquet, the sampler is called with the references, and GRPO
            groups are keyed by (prompt id, image hash).
        true_cfg: whether ``guidance_scale`` is a true classifier-free guidance scale (above
            ``cfg_threshold`` each step runs the transformer twice, with the prompt and with
            ``negative_prompt``) rather than an embedded guidance value.
        cfg_threshold: the guidance scale above which true CFG runs (1 as most diffusers
            pipelines; 0 for Z-Image, whose pipeline guides above 0).
        config_kwargs: the :class:`~paco_grpo.grpo_config.GRPOConfig` fields passed to the
            sampler's constructor by keyword.
    """

    name: str
    sampler: type
    diffusers_class: str
    lora_target_modules: tuple[str, ...]
    tiny_builder: str
    architectures: Mapping[str, Mapping[str, str]]
    scheduler_config: Mapping[str, Any]
    edits: bool = False
    true_cfg: bool = False
    cfg_threshold: float = 1.0
    config_kwargs: tuple[str, ...] = ("max_sequence_length",)

    def build_sampler(self, pipe, config):
        """The sampler of ``pipe`` with its arguments from ``config`` (a ``GRPOConfig``)."""
        return self.sampler(pipe, **{name: getattr(config, name) for name in self.config_kwargs})

    def build_tiny(self, output_dir: str | Path, seed: int = 0) -> Path:
        """Write the tiny offline pipeline of this model to ``output_dir``; returns the folder."""
        module, function = self.tiny_builder.split(":")
        return getattr(importlib.import_module(module), function)(output_dir, seed=seed)

    def runs_true_cfg(self, guidance_scale: float) -> bool:
        """Whether sampling at ``guidance_scale`` runs true CFG (two transformer calls a step)."""
        return self.true_cfg and guidance_scale > self.cfg_threshold


PIPELINE_SPECS: dict[str, PipelineSpec] = {}
"""The registered generators by recipe name, in registration order."""


def register_pipeline(spec: PipelineSpec) -> PipelineSpec:
    """Register ``spec`` under ``spec.name`` (a model file calls this once, at import).

    Raises:
        ValueError: another spec already holds the name.
    """
    if PIPELINE_SPECS.get(spec.name, spec) is not spec:
        raise InputError(
            f"a pipeline named {spec.name!r} is already registered "
            f"({PIPELINE_SPECS[spec.name].sampler.__name__}); pick another name."
        )
    PIPELINE_SPECS[spec.name] = spec
    return spec


def get_pipeline_spec(name: str) -> PipelineSpec:
    """The spec registered as ``name``.

    Raises:
        ValueError: an unknown name (the message lists the registered ones).
    """
    if name not in PIPELINE_SPECS:
        raise InputError(
            f"Unknown pipeline {name!r}; registered pipelines: {tuple(PIPELINE_SPECS)}."
        )
    return PIPELINE_SPECS[name]
