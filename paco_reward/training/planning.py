"""``paco-reward plan``: an SFT recipe's memory per process, from the evaluator's real
architecture on the meta device (see :mod:`paco_reward.planning` for how each figure is
counted).

    >>> from paco_reward.training.cli import load_recipe
    >>> from paco_reward.training.planning import plan_sft
    >>> plan = plan_sft(load_recipe("recipes/paco_reward_7b_lora.yaml"), num_processes=8,
    ...                 gpu_memory_gb=80, sharded=True)                  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from paco_reward.architectures import build_empty, count_parameters, model_config
from paco_reward.planning import (
    ActivationEstimate,
    Component,
    GiB,
    Plan,
    PlanOptions,
    activation_bytes,
    node_facts,
)
from paco_reward.training.sft_config import PacoSFTConfig

__all__ = ["SFTPlanConfig", "SFTShape", "plan_sft", "sft_activation_estimate"]


@dataclass
class SFTPlanConfig(PacoSFTConfig, PlanOptions):
    """``paco-reward plan``'s arguments: an SFT recipe (same overrides as ``train``) and the
    launch to plan it for."""

    def __post_init__(self) -> None:
        if not torch.cuda.is_available():
            self.use_cpu = True  # a plan is made anywhere; bf16 is refused on a CPU otherwise
        super().__post_init__()

    def plan(self) -> Plan:
        return plan_sft(self, num_processes=self.num_processes, num_machines=self.num_machines,
                        gpu_memory_gb=self.gpu_memory_gb, sharded=self.sharded)  # fmt: skip


# The processor's default ceiling when a recipe sets none, by model type (Qwen2.5-VL's for
# any other).
DEFAULT_MAX_PIXELS = {"qwen2_5_vl": 12_845_056, "qwen3_vl": 16_777_216}
# Text around the two images: the rendered instruction (about 150 tokens of the consistency
# template) and the answer (Yes/No and its reason), which is all the loss reads.
PROMPT_TOKENS = 192
ANSWER_TOKENS = 256


def pixels_per_token(config: dict) -> int:
    """Pixels of one vision token of the model ``config`` describes: (patch size x spatial
    merge)², 28 x 28 for Qwen2.5-VL, 32 x 32 for Qwen3-VL.

    Example:
        >>> pixels_per_token({"vision_config": {"patch_size": 16, "spatial_merge_size": 2}})
        1024
    """
    vision = config.get("vision_config", {})
    side = vision.get("patch_size", 14) * vision.get("spatial_merge_size", 2)
    return side * side


@dataclass(frozen=True)
class SFTShape:
    """The tokens of one training pair: ``images`` images of ``image_tokens`` tokens each, the
    rendered instruction's ``prompt_tokens`` and the ``answer_tokens`` the loss reads.

    Example:
        >>> SFTShape(image_tokens=2674).length
        5796
    """

    image_tokens: int
    prompt_tokens: int = PROMPT_TOKENS
    answer_tokens: int = ANSWER_TOKENS
    images: int = 2

    @property
    def length(self) -> int:
        return self.images * self.image_tokens + self.prompt_tokens + self.answer_tokens


def _language_model_forward(model, batch: int, shape: SFTShape, dtype):
    """A training forward of the language model on meta inputs: the image features stand in
    for the frozen vision tower (it saves nothing for the backward), and the loss reads the
    answer's logits only (``logits_to_keep``, as the trainer does). The input embeddings
    need a gradient, as every block's input but the first does: the one block the estimate
    runs stands for all of them."""
    config = model.config
    hidden = (
        config.text_config.hidden_size if hasattr(config, "text_config") else config.hidden_size
    )
    length, answer = shape.length, shape.answer_tokens
    embeds = torch.empty(batch, length, hidden, device="meta", dtype=dtype, requires_grad=True)
    positions = torch.zeros(3, batch, length, device="meta", dtype=torch.long)
    labels = torch.zeros(batch * answer, device="meta", dtype=torch.long)
    language_model = model.get_decoder()

    def forward():
        out = language_model(inputs_embeds=embeds, position_ids=positions, use_cache=False)
        logits = model.lm_head(out.last_hidden_state[:, -answer:]).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels)

    return forward


def mixed_precision_dtype(config) -> torch.dtype | None:
    """The dtype the trainer's autocast computes in (``bf16`` / ``fp16`` of the config), or
    ``None`` without mixed precision."""
    if config.bf16:
        return torch.bfloat16
    return torch.float16 if config.fp16 else None


def _meta_model(config, architecture: dict[str, Any]):
    """The recipe's model on the meta device as the trainer trains it (frozen, with its LoRA
    adapter), and the frozen model's parameter count."""
    from peft import get_peft_model

    from paco_reward.training.loading import lora_config

    model = build_empty(architecture, getattr(torch, _weights_dtype(config)))
    base = count_parameters(model)
    model.requires_grad_(False)
    lora = lora_config(config, model)
    if lora is not None:
        with torch.device("meta"):
            model = get_peft_model(model, lora)
    return model, base


def _weights_dtype(config) -> str:
    return config.model_dtype if config.model_dtype != "auto" else "bfloat16"


def _max_pixels(config, architecture: dict[str, Any]) -> int:
    return config.image_max_pixels or DEFAULT_MAX_PIXELS.get(
        architecture.get("model_type"), DEFAULT_MAX_PIXELS["qwen2_5_vl"]
    )


def _estimate(model, config, architecture: dict[str, Any], shape: SFTShape | None):
    shape = shape or SFTShape(_max_pixels(config, architecture) // pixels_per_token(architecture))
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    forward = _language_model_forward(
        base, config.per_device_train_batch_size, shape, getattr(torch, _weights_dtype(config))
    )
    return activation_bytes(model, forward, autocast_dtype=mixed_precision_dtype(config)), shape


def sft_activation_estimate(
    config, *, architecture: dict[str, Any] | None = None, shape: SFTShape | None = None
) -> ActivationEstimate:
    """The activation estimate of one micro-batch of the SFT recipe ``config``: what
    :func:`plan_sft`'s activations are made of (its saved bytes with and without gradient
    checkpointing are what ``benchmarks/sft_step.py`` measures). ``architecture`` and
    ``shape`` as in :func:`plan_sft`."""
    architecture = architecture or model_config(config.model_name_or_path)
    model, _ = _meta_model(config, architecture)
    return _estimate(model, config, architecture, shape)[0]


def plan_sft(
    config,
    *,
    num_processes: int = 1,
    gpu_memory_gb: float | None = None,
    sharded: bool = False,
    num_machines: int = 1,
    architecture: dict[str, Any] | None = None,
    shape: SFTShape | None = None,
) -> Plan:
    """The memory of one process of the SFT recipe ``config`` (a ``PacoSFTConfig``) on
    ``num_processes`` in all, over ``num_machines`` nodes (``sharded``: ZeRO-2, gradients
    and optimizer states divided among them, as ``recipes/accelerate/sft_zero2.yaml``
    launches), and whether it fits.

    ``architecture``: the model's config as a dict (default: ``model_name_or_path``'s, a
    local folder's or the shipped one); ``shape``: the tokens of a pair (default: the
    recipe's pixel ceiling, :data:`PROMPT_TOKENS` and :data:`ANSWER_TOKENS`)."""
    nodes = node_facts(num_processes, num_machines)
    dtype = _weights_dtype(config)
    architecture = architecture or model_config(config.model_name_or_path)
    model, base = _meta_model(config, architecture)
    lora = config.use_lora
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad) if lora else base
    share = num_processes if sharded else 1
    name = type(model.get_base_model() if lora else model).__name__
    components = [Component(f"model ({name})", base if lora else 0, dtype, note="frozen")]
    states = [
        ("LoRA parameters" if lora else "parameters (trained)", trained, 1),
        ("gradients", trained, share),
        ("AdamW states", 2 * trained, share),
    ]
    components += [
        Component(
            label,
            n // div,
            "float32" if lora else dtype,
            kind="trained",
            note=f"1/{div} of it (ZeRO-2)" if div > 1 else "",
        )  # fmt: skip
        for label, n, div in states
    ]
    pixels = _max_pixels(config, architecture)
    estimate, shape = _estimate(model, config, architecture, shape)
    batch = config.per_device_train_batch_size
    ckpt = bool(config.gradient_checkpointing)
    components.append(
        Component(
            f"activations: {batch} pairs x {shape.length} tokens",
            0,
            dtype,
            bytes=estimate.bytes(ckpt),
            kind="activations",
            note=f"estimate, checkpointing {'on' if ckpt else 'off'} "
            f"({'off' if ckpt else 'on'}: {estimate.bytes(not ckpt) / GiB:.1f} GiB); "
            f"{shape.images} images of {shape.image_tokens} tokens ({pixels:,} px), "
            f"{shape.prompt_tokens} prompt + {shape.answer_tokens} answer tokens",
        )  # fmt: skip
    )
    memory = int(gpu_memory_gb * GiB) if gpu_memory_gb else None
    pairs = batch * num_processes * config.gradient_accumulation_steps
    plan = Plan(
        f"{config.model_name_or_path} SFT on {num_processes} process(es)",
        components,
        gpu_memory_bytes=memory,
        facts={
            "processes": num_processes,
            **nodes,
            "pairs_per_optimizer_step": pairs,
            "image_tokens_per_image": shape.image_tokens,
            "not_counted": "the frozen vision tower's transient forward memory, CUDA context "
            "and allocator caching (about 1-3 GiB)",
        },
    )
    if plan.fits is False:
        plan.advice = [
            a
            for a, needed in (
                ("gradient_checkpointing: true", not ckpt),
                (f"a smaller per_device_train_batch_size (now {batch})", batch > 1),
                (f"a smaller image_max_pixels (now {pixels:,})", True),
                ("shard with recipes/accelerate/sft_zero2.yaml", not sharded),
            )
            if needed
        ]
    return plan
