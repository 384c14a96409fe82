"""``paco-eval t2is plan``: the GPU memory of each model the stages load, before any loads.

The generate stage holds the generator's pipeline (every component, frozen, in
``gen_dtype``); the judge stage loads its models one after another (each consistency judge,
then the VQAScore model, then the aesthetic predictor; a judge that the ``judge:NAME``
alignment reuses stays), so its peak is the largest of them. Parameters are counted on the
meta device from the models' configurations (:mod:`paco_reward.architectures`: a local
folder's ``config.json``, or the shipped file of a known hub id); served judges hold nothing
here.

    >>> from paco_eval.t2is.benchmark import T2ISConfig
    >>> plans = plan_t2is(T2ISConfig(aesthetics="", alignment=""), gpu_memory_gb=80)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from paco_reward.architectures import build_empty, count_parameters, model_config
from paco_reward.planning import Component, GiB, Plan

__all__ = ["plan_t2is", "run_plan"]

_NOT_COUNTED = ("activations (inference, no gradients: a forward's are transient), the CUDA "
                "context and allocator caching (about 1-3 GiB)")  # fmt: skip


def _model(name: str, source: str, dtype: str, note: str) -> Component:
    config = model_config(source)
    kind = config.get("_class_name") or (config.get("architectures") or ["?"])[0]
    return Component(f"{name} ({kind})", count_parameters(build_empty(config)), dtype, note=note)


def plan_t2is(config: Any, gpu_memory_gb: float | None = None) -> list[Plan]:
    """One :class:`~paco_reward.planning.Plan` per model-loading step of ``config``'s stages
    (generate; each consistency judge; alignment; aesthetics), each against ``gpu_memory_gb``."""
    from paco_eval.t2is.stages import _judges

    memory = int(gpu_memory_gb * GiB) if gpu_memory_gb else None
    facts = {"not_counted": _NOT_COUNTED}
    plans = []
    if config.pipeline:
        from paco_grpo.architectures import pipeline_configs

        dtype = config.gen_dtype or "bfloat16"
        components = [Component(f"{part} ({cfg.get('_class_name') or cfg['architectures'][0]})",
                                count_parameters(build_empty(cfg)), dtype, note="frozen")
                      for part, cfg in pipeline_configs(config.model_name_or_path).items()]  # fmt: skip
        if config.lora:
            components.append(Component("LoRA", 0, dtype, bytes=0, note="merged into the transformer's weights"))
        plans.append(Plan(f"generate: {config.pipeline} {config.model_name_or_path}", components, memory, dict(facts)))
    reused = config.alignment.removeprefix("judge:") if config.alignment.startswith("judge:") else None
    judge_dtype = config.dtype or "bfloat16"
    for judge in _judges(config):
        if judge.spec.kind == "server":
            continue
        component = _model(judge.name, judge.spec.target, judge_dtype,
                           "alone" if judge.name != reused else "kept for the alignment stage")  # fmt: skip
        plans.append(Plan(f"judge: consistency {judge.name}", [component], memory, dict(facts)))
    if config.alignment and reused is None:
        plans.append(Plan("judge: alignment (VQAScore)",
                          [_model("VQAScore", config.alignment, config.alignment_dtype, "alone")], memory, dict(facts)))  # fmt: skip
    if config.aesthetics:
        plans.append(Plan("judge: aesthetics", [_model("aesthetic CLIP", config.aesthetics, "float32", "alone")],
                          memory, dict(facts)))  # fmt: skip
    return plans


def run_plan(config: Any) -> int:
    """Print each step's plan; exit 1 when one cannot fit ``--gpu_memory_gb``."""
    plans = plan_t2is(config, config.gpu_memory_gb)
    for plan in plans:
        print(plan.table(), end="\n\n")
    return 1 if any(p.certain_failure for p in plans) else 0
