"""The policy of a GRPO run: the diffusers pipeline named by ``config.pipeline``, its
transformer frozen with a trainable LoRA adapter, and the sampler that draws from it. The
pipeline's :class:`~paco_grpo.pipelines.registry.PipelineSpec` says which classes those are."""

from __future__ import annotations

import difflib
import logging

import torch

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.pipelines import get_pipeline_spec, prepare_edit_items
from paco_reward.errors import ConfigError, InputError
from paco_reward.hub import check_source

logger = logging.getLogger(__name__)

__all__ = [
    "POLICY_ADAPTER",
    "REFERENCE_ADAPTER",
    "adapter_params",
    "add_lora",
    "add_reference_adapter",
    "copy_adapter",
    "build_sampler",
    "check_lora_targets",
    "check_pipeline",
    "edit_items",
    "load_pipeline",
    "without_cudnn_attention",
]

POLICY_ADAPTER = "default"  # peft's name of the first adapter: the trained policy
REFERENCE_ADAPTER = "reference"  # GARDO's resettable reference (kl_reference: adapter)

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

    from paco_reward.quiet import apply_quiet

    apply_quiet()  # diffusers (and transformers) are imported by now
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
    init) on ``lora_target_modules`` of the transformer; returns the transformer.

    Raises:
        ConfigError: a target that names no module of the transformer (the message names it
            and lists the module names closest to it).
    """
    from diffusers.training_utils import cast_training_params
    from peft import LoraConfig

    transformer = pipe.transformer
    for module in [*pipe.components.values(), transformer]:
        if isinstance(module, torch.nn.Module):
            module.requires_grad_(False)
    check_lora_targets(config.lora_target_modules, transformer)
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
    if transformer.device.type == "cuda":
        without_cudnn_attention(transformer)
    if config.gradient_checkpointing:
        transformer.enable_gradient_checkpointing(
            without_cudnn_attention.checkpoint if transformer.device.type == "cuda" else None
        )
    return transformer


def add_reference_adapter(config: GRPOConfig, transformer) -> None:
    """GARDO's resettable reference: a second LoRA adapter (:data:`REFERENCE_ADAPTER`, the
    policy's shape, frozen) on the same transformer, a copy of the policy's adapter; the
    policy's stays the active, trainable one (peft's ``set_adapter`` makes only the active
    adapter trainable)."""
    import warnings

    from peft import LoraConfig

    with warnings.catch_warnings():  # peft warns that a second adapter is a second adapter
        warnings.simplefilter("ignore", UserWarning)
        transformer.add_adapter(
            LoraConfig(
                r=config.lora_r,
                lora_alpha=config.lora_alpha,
                init_lora_weights=config.lora_init,
                target_modules=config.lora_target_modules,
                lora_dropout=0.0,
            ),
            adapter_name=REFERENCE_ADAPTER,
        )
    transformer.set_adapter(POLICY_ADAPTER)
    copy_adapter(transformer)


def adapter_params(transformer, adapter: str) -> dict[str, torch.nn.Parameter]:
    """``{name with the adapter's name replaced by '{}': parameter}`` of one LoRA adapter."""
    marker = f".{adapter}."
    return {n.replace(marker, ".{}."): p for n, p in transformer.named_parameters() if marker in n}


@torch.no_grad()
def copy_adapter(transformer, src: str = POLICY_ADAPTER, dst: str = REFERENCE_ADAPTER) -> None:
    """Copy LoRA adapter ``src``'s weights into adapter ``dst`` (FSDP2 shards copy shard to
    shard: both adapters are sharded alike)."""
    source, target = adapter_params(transformer, src), adapter_params(transformer, dst)
    if set(source) != set(target):
        raise InputError(f"adapters {src!r} and {dst!r} adapt different modules.")
    for name, p in target.items():
        p.copy_(source[name])


def check_lora_targets(targets, transformer) -> None:
    """Each LoRA target must name a module of ``transformer`` by peft's rule (the module's
    name, or its name's ending after a dot).

    Raises:
        ConfigError: naming the targets that match nothing, each with the module names
            closest to it (difflib).

    Example:
        >>> check_lora_targets(["to_q"], torch.nn.ModuleDict({"to_q": torch.nn.Linear(2, 2)}))
        >>> check_lora_targets(["to_qq"], torch.nn.ModuleDict({"to_q": torch.nn.Linear(2, 2)}))
        Traceback (most recent call last):
        ...
        paco_reward.errors.ConfigError: lora_target_modules ['to_qq'] match no module of the ModuleDict: 'to_qq' (closest: ['to_q']). Fix the names, or leave lora_target_modules out for the pipeline's default.
    """
    names = [name for name, _ in transformer.named_modules() if name]
    # every dotted ending of every module name that does not start at a block index: the
    # names a target is usually written as
    endings = sorted(
        {
            ".".join(parts[k:])
            for parts in (n.split(".") for n in names)
            for k in range(len(parts))
            if not parts[k].isdigit()
        }
    )
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        close = "; ".join(
            f"{t!r} (closest: {difflib.get_close_matches(t, endings, n=4, cutoff=0.5)})"
            for t in missing
        )
        raise ConfigError(
            f"lora_target_modules {missing} match no module of the "
            f"{type(transformer).__name__}: {close}. Fix the names, or leave "
            "lora_target_modules out for the pipeline's default."
        )


class _WithoutCudnnAttention:
    """PyTorch's cuDNN attention fails in the backward of FLUX.1-dev's real-size attention
    (H200, torch 2.11: "mha_graph.execute ... is_good()", or an illegal memory access without
    CUDA_LAUNCH_BLOCKING; seen by benchmarks/gpu_check.py); flash attention, its next choice,
    trains. So the policy's transformer runs without it: its forward calls (sampling,
    re-scoring, the reference pass) and, with gradient checkpointing, the forward it
    recomputes in the backward pass, and nothing else in the process (an in-process
    evaluator keeps cuDNN attention).

    ``without_cudnn_attention(transformer)`` wraps the transformer's calls;
    ``without_cudnn_attention.checkpoint`` is the gradient-checkpointing function that
    recomputes without it. The flags are process-wide while a call runs, so a reward thread
    scoring at that moment runs without cuDNN attention too (slower, not wrong).
    """

    logged = False

    @staticmethod
    def context():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        return sdpa_kernel(backends)

    def __call__(self, transformer: torch.nn.Module) -> torch.nn.Module:
        contexts = []

        def enter(module, args, kwargs):
            contexts.append(self.context())
            contexts[-1].__enter__()

        def leave(module, args, kwargs, output):
            contexts.pop().__exit__(None, None, None)

        transformer.register_forward_pre_hook(enter, with_kwargs=True)
        transformer.register_forward_hook(leave, with_kwargs=True, always_call=True)
        if not type(self).logged:
            type(self).logged = True
            logger.info(
                "The policy's transformer runs without PyTorch's cuDNN attention (its backward "
                "fails at FLUX.1-dev's size); flash attention takes its place."
            )
        return transformer

    def checkpoint(self, function, *args, **kwargs):
        """``torch.utils.checkpoint`` (non-reentrant, as diffusers') whose recomputation in
        the backward pass runs without cuDNN attention, as the forward did."""
        from torch.utils.checkpoint import checkpoint

        return checkpoint(
            function, *args, use_reentrant=False,
            context_fn=lambda: (self.context(), self.context()), **kwargs,
        )  # fmt: skip


without_cudnn_attention = _WithoutCudnnAttention()


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
