"""The policy of a GRPO run: the diffusers pipeline named by ``config.pipeline``, its
transformer frozen with a trainable LoRA adapter, and the sampler that draws from it. The
pipeline's :class:`~paco_grpo.pipelines.registry.PipelineSpec` says which classes those are."""

from __future__ import annotations

import torch

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.pipelines import get_pipeline_spec, prepare_edit_items
from paco_reward.errors import ConfigError
from paco_reward.hub import check_source

__all__ = ["add_lora", "build_sampler", "check_pipeline", "edit_items", "load_pipeline"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_pipeline(config: GRPOConfig, device):
    """The diffusers pipeline of ``config.pipeline`` (its spec's ``diffusers_class``:
    ``FluxPipeline``, ``QwenImagePipeline``, ...) from ``config.model_name_or_path`` in
    ``config.dtype``, on ``device``.

    ``config.model_init_kwargs`` go to the pipeline's ``from_pretrained`` (``revision``,
    ``variant``, ``cache_dir``, ``token``, ``local_files_only``, ``device_map``, ...; see
    :data:`paco_reward.hub.PIPELINE_KWARGS`). A ``device_map`` naming one device
    (``"cuda"``, ``"cpu"``) loads the weights there directly, then the pipeline moves to
    ``device``; one that spreads the components over devices (``"balanced"``) leaves them
    where it put them.

    Example:
        >>> pipe = load_pipeline(config, accelerator.device)  # doctest: +SKIP
    """
    import diffusers

    name = get_pipeline_spec(config.pipeline).diffusers_class
    pipe = getattr(diffusers, name).from_pretrained(
        check_source(config.model_name_or_path, "pipeline"),
        dtype=_DTYPES[config.dtype],
        **config.model_init_kwargs,
    )
    device_map = getattr(pipe, "hf_device_map", None)
    if isinstance(device_map, dict) and len(device_map) > 1:
        return pipe  # spread over devices by diffusers; .to() would undo (and refuses) it
    return pipe.to(device)


def check_pipeline(config: GRPOConfig, pipe) -> None:
    """Fail early when a recipe is given a pipeline of another type than its ``pipeline``."""
    expected = get_pipeline_spec(config.pipeline).diffusers_class
    if expected not in {c.__name__ for c in type(pipe).__mro__}:
        raise ConfigError(
            f"config.pipeline={config.pipeline!r} needs a diffusers {expected}; got a "
            f"{type(pipe).__name__}. Set `pipeline:` to the model's type."
        )


def add_lora(config: GRPOConfig, pipe):
    """Freeze every component and add a LoRA adapter (``lora_r``, ``lora_alpha``, seeded
    init) on ``lora_target_modules`` of the transformer; returns the transformer."""
    from diffusers.training_utils import cast_training_params
    from peft import LoraConfig

    transformer = pipe.transformer
    for module in [*pipe.components.values(), transformer]:
        if isinstance(module, torch.nn.Module):
            module.requires_grad_(False)
    if not any(
        name.endswith(t)
        for name, _ in transformer.named_modules()
        for t in config.lora_target_modules
    ):
        raise ConfigError(
            f"lora_target_modules {config.lora_target_modules} match no module of the transformer."
        )
    torch.manual_seed(config.seed)
    transformer.add_adapter(
        LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            init_lora_weights=config.lora_init,
            target_modules=config.lora_target_modules,
            lora_dropout=0.0,
        )
    )
    cast_training_params(transformer, dtype=torch.float32)
    if config.gradient_checkpointing:
        transformer.enable_gradient_checkpointing()
    if transformer.device.type == "cuda":
        # PyTorch's cuDNN attention fails in the backward of FLUX.1-dev's real-size attention
        # (H200, torch 2.11: "mha_graph.execute ... is_good()", or an illegal memory access
        # without CUDA_LAUNCH_BLOCKING); flash attention, its next choice, trains. Seen by
        # benchmarks/gpu_check.py.
        torch.backends.cuda.enable_cudnn_sdp(False)
    return transformer


def build_sampler(config: GRPOConfig, pipe):
    """The Flow-GRPO sampler of the pipeline type, with its arguments from ``config``."""
    return get_pipeline_spec(config.pipeline).build_sampler(pipe, config)


def edit_items(config: GRPOConfig, items, resolution: int, size_multiple: int):
    """Editing items with their reference resized to ``resolution**2`` pixels (or the item's
    height x width with ``item_resolution_overrides``), aspect ratio preserved."""
    areas = [
        int(it.height) * int(it.width)
        if config.item_resolution_overrides and it.height and it.width
        else resolution * resolution
        for it in items
    ]
    return prepare_edit_items(items, areas, size_multiple)
