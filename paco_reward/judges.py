"""Judge families: the one place that says, from a model's config, how a judge is scored.

Each family the library has met is a :class:`JudgeSpec`: the config ``model_type`` values that
name it, its vision tower's class in transformers, its tiny offline builder, the shrink
function the benchmarks build reduced models with, and the published size of the hub models
whose architecture ships (:data:`paco_reward.architectures.MODELS`). Its in-process backend
follows from the tower: :class:`~paco_reward.local_backend.LocalBackend` (dynamic resolution,
each distinct image through the tower once, inputs built on the host, grouped window
attention) where :class:`~paco_reward.host_inputs.VisionGridInputs` knows the tower,
:class:`~paco_reward.processor_backend.ProcessorBackend` (the model's own processor and
forward) otherwise, and for a ``model_type`` no spec names. ``TransformersBackend.from_pretrained``
asks :func:`backend_for_config` after reading the config and before any weight loads.

    >>> spec = judge_spec_for_config({"model_type": "glm4v"})
    >>> spec.name, spec.backend
    ('glm4v', 'paco_reward.processor_backend:ProcessorBackend')
    >>> JUDGE_SPECS["qwen2_5_vl"].backend
    'paco_reward.local_backend:LocalBackend'
    >>> backend_for_config({"model_type": "paddleocr_vl"})
    'paco_reward.processor_backend:ProcessorBackend'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "JUDGE_SPECS",
    "JudgeSpec",
    "backend_for_config",
    "judge_spec_for_config",
    "resolve",
]

LOCAL_BACKEND = "paco_reward.local_backend:LocalBackend"
PROCESSOR_BACKEND = "paco_reward.processor_backend:ProcessorBackend"


def resolve(path: str) -> Any:
    """The object a ``"module:name"`` path names (imported when asked).

    Example:
        >>> resolve("paco_reward.judges:resolve") is resolve
        True
    """
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class JudgeSpec:
    """What the library knows of one judge family.

    Attributes:
        name: the family's name (the key of :data:`JUDGE_SPECS`).
        model_types: the config ``model_type`` values of the family (the top-level config's).
        vision_tower: the class name of the family's vision tower in transformers.
        tiny_builder: ``"module:function"`` of its tiny offline builder,
            ``function(output_dir, seed=0, **overrides) -> Path``; ``None`` where there is none.
        shrink: ``"module:function"`` of ``function(config: dict, scale: float) -> dict``,
            the shipped config with widths and depths times ``scale`` (the benchmarks' and
            GPU checks' reduced models); ``None`` where there is none.
        published: hub id -> published parameter count, for each hub model of the family
            whose architecture ships (:data:`paco_reward.architectures.MODELS`).
    """

    name: str
    model_types: tuple[str, ...]
    vision_tower: str
    tiny_builder: str | None = None
    shrink: str | None = None
    published: Mapping[str, float] = field(default_factory=dict)

    @property
    def backend(self) -> str:
        """``"module:class"`` of the backend that scores the family in-process: the Qwen-VL
        scorer where it knows the vision tower, the processor-driven one otherwise."""
        from paco_reward.host_inputs import knows_vision_tower

        return LOCAL_BACKEND if knows_vision_tower(self.vision_tower) else PROCESSOR_BACKEND

    def build_tiny(self, output_dir: str | Path, seed: int = 0, **overrides: Any) -> Path:
        """Write the family's tiny offline judge to ``output_dir``; returns the folder.

        Raises:
            InputError: the family has no tiny builder.
        """
        return self._function("tiny_builder")(output_dir, seed=seed, **overrides)

    def shrunk(self, config: dict[str, Any], scale: float) -> dict[str, Any]:
        """``config`` (the family's shipped one) with widths and depths times ``scale``.

        Raises:
            InputError: the family has no shrink function.
        """
        return self._function("shrink")(config, scale)

    def _function(self, name: str) -> Callable:
        from paco_reward.errors import InputError

        path = getattr(self, name)
        if path is None:
            raise InputError(f"the judge family {self.name!r} has no {name}.")
        return resolve(path)


JUDGE_SPECS: dict[str, JudgeSpec] = {
    spec.name: spec
    for spec in (
        JudgeSpec("qwen2_vl", ("qwen2_vl",), "Qwen2VisionTransformerPretrainedModel"),
        JudgeSpec(
            "qwen2_5_vl",
            ("qwen2_5_vl",),
            "Qwen2_5_VisionTransformerPretrainedModel",
            tiny_builder="paco_reward.testing.qwen:build_tiny_qwen2_5_vl",
            shrink="paco_reward.architectures.scaled:shrink_qwen2_5_vl",
            published={"Qwen/Qwen2.5-VL-7B-Instruct": 8.29e9, "X-GenGroup/PaCo-Reward-7B": 8.29e9},
        ),
        JudgeSpec(
            "qwen3_vl",
            ("qwen3_vl",),
            "Qwen3VLVisionModel",
            tiny_builder="paco_reward.testing.qwen3_vl:build_tiny_qwen3_vl",
            shrink="paco_reward.architectures.scaled:shrink_qwen3_vl",
            published={"Qwen/Qwen3-VL-8B-Instruct": 8.77e9},
        ),
        JudgeSpec("qwen3_vl_moe", ("qwen3_vl_moe",), "Qwen3VLMoeVisionModel"),
        JudgeSpec(
            "gemma3",
            ("gemma3",),
            "SiglipVisionModel",
            tiny_builder="paco_reward.testing.gemma3:build_tiny_gemma3",
            shrink="paco_reward.architectures.scaled:shrink_gemma3",
            published={"google/gemma-3-4b-it": 4.30e9},
        ),
        JudgeSpec(
            "glm4v",
            ("glm4v",),
            "Glm4vVisionModel",
            tiny_builder="paco_reward.testing.glm4v:build_tiny_glm4v",
        ),
    )
}
"""The judge families by name."""


def _model_type(config) -> str | None:
    if isinstance(config, Mapping):
        return config.get("model_type")
    return getattr(config, "model_type", None)


def judge_spec_for_config(config) -> JudgeSpec | None:
    """The spec of the family ``config`` (a transformers config or its dict) names by its
    ``model_type``; ``None`` for a family no spec names."""
    model_type = _model_type(config)
    return next((s for s in JUDGE_SPECS.values() if model_type in s.model_types), None)


def backend_for_config(config) -> str:
    """``"module:class"`` of the in-process backend for a model of ``config``: its family's
    (:attr:`JudgeSpec.backend`), else the processor-driven one."""
    spec = judge_spec_for_config(config)
    return spec.backend if spec is not None else PROCESSOR_BACKEND
