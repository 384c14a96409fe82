"""Recipe names -> policy pipelines: the one registry of generators.

Each model file of :mod:`paco_grpo.pipelines` ends with a :func:`register_pipeline` call;
``GRPOConfig.pipeline`` must be one of the registered names, and the policy
(:mod:`paco_grpo.policy`) loads, checks and samples the pipeline through its
:class:`PipelineSpec`, so nothing else in the trainer names a model.

    >>> from paco_grpo.pipelines import get_pipeline_spec
    >>> spec = get_pipeline_spec("qwen_image")
    >>> spec.diffusers_class, spec.edits, spec.true_cfg
    ('QwenImagePipeline', False, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from paco_reward.errors import InputError

__all__ = ["PIPELINE_SPECS", "PipelineSpec", "get_pipeline_spec", "register_pipeline"]


@dataclass(frozen=True)
class PipelineSpec:
    """How the trainer uses one generator.

    Attributes:
        name: the recipe's ``pipeline:`` value.
        sampler: the :class:`~paco_grpo.pipelines.sampling.GRPOSampler` subclass, built as
            ``sampler(pipe, **{k: getattr(config, k) for k in config_kwargs})``.
        diffusers_class: the diffusers pipeline class ``model_name_or_path`` loads with
            (``getattr(diffusers, diffusers_class).from_pretrained``); a pipeline passed to
            the trainer must be one (or a subclass).
        edits: whether the policy edits a reference image per prompt: its prompt files are
            (prompt, image) parquet, the sampler is called with the references, and GRPO
            groups are keyed by (prompt id, image hash).
        true_cfg: whether ``guidance_scale`` is a true classifier-free guidance scale (above 1
            each step runs the transformer twice, with the prompt and with
            ``negative_prompt``) rather than an embedded guidance value.
        config_kwargs: the :class:`~paco_grpo.grpo_config.GRPOConfig` fields passed to the
            sampler's constructor by keyword.
    """

    name: str
    sampler: type
    diffusers_class: str
    edits: bool = False
    true_cfg: bool = False
    config_kwargs: tuple[str, ...] = ("max_sequence_length",)

    def build_sampler(self, pipe, config):
        """The sampler of ``pipe`` with its arguments from ``config`` (a ``GRPOConfig``)."""
        return self.sampler(pipe, **{name: getattr(config, name) for name in self.config_kwargs})


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
