"""``paco-grpo plan``: a GRPO recipe's memory per process, from the real architectures on
the meta device (see :mod:`paco_reward.planning` for how each figure is counted).

    >>> from paco_grpo.grpo_config import GRPOConfig
    >>> from paco_grpo.planning import plan_grpo
    >>> plan = plan_grpo(GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml"),
    ...                  num_processes=8, gpu_memory_gb=80)          # doctest: +SKIP
    >>> print(plan.table())                                           # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import torch

from paco_grpo.architectures import pipeline_configs
from paco_grpo.data import load_prompts
from paco_grpo.epoch_shape import EpochShape
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.pipelines import get_pipeline_spec
from paco_reward.architectures import (
    ArchitectureError,
    build_empty,
    count_parameters,
    model_config,
)
from paco_reward.launch import is_loopback
from paco_reward.planning import (
    Component,
    GiB,
    Plan,
    PlanOptions,
    activation_bytes,
    dtype_bytes,
    node_facts,
)

__all__ = [
    "GRPOPlanConfig",
    "gardo_components",
    "plan_grpo",
    "prompt_encodings",
    "reward_server_facts",
    "transformer_activation_bytes",
]


@dataclass
class GRPOPlanConfig(GRPOConfig, PlanOptions):
    """``paco-grpo plan``'s arguments: a GRPO recipe (same overrides as ``train``) and the
    launch to plan it for."""

    def plan(self) -> Plan:
        return plan_grpo(self, num_processes=self.num_processes, num_machines=self.num_machines,
                         gpu_memory_gb=self.gpu_memory_gb, sharded=self.sharded)  # fmt: skip


# The scorer's dtype on a GPU (PacoReward's default there) and CLIP's (its reward's default).
_REWARD_DTYPES = {"consistency": "bfloat16", "edit_consistency": "bfloat16"}
# What recipes/serve_rewards.sh serves in (vllm serve and paco-reward serve alike).
SERVER_DTYPE = "bfloat16"


def _tokens(resolution: int, vae_scale: int = 8, patch: int = 2) -> int:
    """Image tokens of a resolution^2 latent, packed 2 x 2 (FLUX and Qwen-Image alike)."""
    return (resolution // (vae_scale * patch)) ** 2


def _meta_transformer(config: dict[str, Any], lora_r: int, lora_alpha: int, targets, dtype):
    from peft import LoraConfig

    model = build_empty(config, dtype)
    model.requires_grad_(False)
    with torch.device("meta"):
        model.add_adapter(LoraConfig(r=lora_r, lora_alpha=lora_alpha, target_modules=list(targets)))
    return model


def _forward(model, pipeline: str, config: dict[str, Any], batch: int, image_tokens: int,
             text_tokens: int, reference_tokens: int, dtype):  # fmt: skip
    """A call of ``model`` (the transformer of ``pipeline``'s ``config``) on meta inputs of
    these shapes, as the policy calls it (its sampler's ``meta_inputs``)."""
    inputs = get_pipeline_spec(pipeline).sampler.meta_inputs(
        config, batch, image_tokens, text_tokens, reference_tokens, dtype
    )
    return lambda: model(**inputs, return_dict=False)[0]


def transformer_calls(config: GRPOConfig) -> int:
    """Transformer forwards per training step: 2 for a true-CFG pipeline guiding above its
    threshold (conditional and unconditional), else 1."""
    return 2 if get_pipeline_spec(config.pipeline).runs_true_cfg(config.train.guidance_scale) else 1


def transformer_activation_bytes(
    config: dict[str, Any],
    *,
    pipeline: str,
    batch_size: int,
    resolution: int,
    text_tokens: int,
    lora_r: int,
    gradient_checkpointing: bool,
    dtype: torch.dtype,
    reference: bool = False,
    calls: int = 1,
    lora_alpha: int | None = None,
    targets: list[str] | None = None,
) -> int:
    """Estimated activation bytes of one training micro-batch of the transformer ``config``
    of ``pipeline`` (a registered name) at ``resolution``^2 with ``text_tokens`` of text, a
    reference image of the same area when ``reference`` (editing), ``calls`` forwards per
    backward (2 with true CFG); LoRA on ``targets`` (default the pipeline's)."""
    targets = targets or get_pipeline_spec(pipeline).lora_target_modules
    model = _meta_transformer(config, lora_r, lora_alpha or 2 * lora_r, targets, dtype)
    tokens = _tokens(resolution)
    forward = _forward(
        model, pipeline, config, batch_size, tokens, text_tokens, tokens if reference else 0, dtype
    )
    return activation_bytes(model, forward, calls=calls).bytes(gradient_checkpointing)


def _distinct_prompts(config: GRPOConfig) -> int | None:
    """At most how many prompt encodings the run caches: the distinct prompts of its training
    and test files (a parquet file's rows, from its metadata: no image is decoded), or
    ``None`` when a file cannot be read here (a plan may be made where the data is not)."""
    import pyarrow.parquet as pq

    texts: set[str] = set()
    rows = 0
    for path in dict.fromkeys([config.prompt_file, config.test.prompt_file or config.prompt_file]):
        try:
            if config.prompt_format == "parquet" or str(path).endswith(".parquet"):
                rows += pq.ParquetFile(path).metadata.num_rows
            else:
                texts.update(
                    it.prompt for it in load_prompts(path, config.prompt_format, config.layout)
                )
        except Exception:  # a missing or unreadable file: the plan stands without the count
            return None
    return rows + len(texts)


def prompt_encodings(config: GRPOConfig, transformer: dict[str, Any], calls: int):
    """What the prompt encodings take: on the GPU, the copies of one training micro-batch's
    (and of the negative prompt with true CFG), a :class:`Component`; in host memory, where
    the sampler caches every prompt's (:meth:`~paco_grpo.pipelines.GRPOSampler.encode_prompts`),
    a fact. Sizes from the sampler's ``text_shapes`` at ``max_sequence_length`` tokens (some
    models cut the padding off: at most this)."""
    shapes = get_pipeline_spec(config.pipeline).sampler.text_shapes(
        transformer, config.max_sequence_length
    )
    per_prompt = sum(math.prod(shape) for shape in shapes) * dtype_bytes(config.dtype)
    batch = config.per_device_train_batch_size + (1 if calls == 2 else 0)
    mib = per_prompt / 2**20
    component = Component(
        f"prompt encodings: {batch} copied from the host", 0, config.dtype,
        bytes=batch * per_prompt, kind="inputs",
        note=f"a micro-batch's{' and the negative prompt' if calls == 2 else ''}, "
        f"{mib:.1f} MiB each; the cache is in host memory",
    )  # fmt: skip
    count = _distinct_prompts(config)
    host = f"{mib:.1f} MiB a distinct prompt, pinned, in each process"
    if count is not None:
        host += (
            f": {count * per_prompt / GiB:.1f} GiB for the {count:,} prompts of the prompt files"
        )
    return component, host


def _reward_components(
    rewards: dict[str, dict], built: Collection[str] = (), label: str = "reward"
) -> list[Component]:
    """One component per reward of ``rewards`` (``{name: constructor arguments}``): its model's
    parameters when it runs in this process, nothing when served or built by the caller."""
    from paco_grpo.rewards.registry import REWARDS

    out = []
    for name, kwargs in rewards.items():
        if name in built:  # the caller's own object: its model is not the config's to read
            out.append(Component(f"{label} {name}", 0, "-", bytes=0, kind="reward",
                                 note="built by the caller: not counted"))  # fmt: skip
            continue
        cls = REWARDS.get(name)
        signature = inspect.signature(cls).parameters if cls else {}
        model = kwargs.get("model", signature["model"].default if "model" in signature else None)
        if model is None or model is inspect.Parameter.empty:
            continue  # a reward without a model (panel_colour_agreement)
        if kwargs.get("server_url"):
            out.append(Component(f"{label} {name}: {model}", 0, "-", bytes=0, kind="reward",
                                 note=f"served at {kwargs['server_url']}: nothing here"))  # fmt: skip
            continue
        default = signature["dtype"].default if "dtype" in signature else "float32"
        dtype = kwargs.get("dtype") or _REWARD_DTYPES.get(name, default)
        params = count_parameters(build_empty(model_config(model)))
        servable = "server_url" in signature  # the rewards that can score on a server
        note = "in this process" + (" (serve it to free this)" if servable else "")
        out.append(Component(f"{label} {name}: {model}", params, str(dtype), kind="reward",
                             note=note))  # fmt: skip
    return out


def gardo_components(config: GRPOConfig, lora: int, share: int = 1) -> list[Component]:
    """What the hacking signals and GARDO's options add to a training process: the image
    feature model (``feature_model``, float32 as :class:`~paco_grpo.features.ImageFeatures`
    loads it, in every process) and the reference adapter (``kl_reference: adapter``: a
    frozen second LoRA of ``lora`` parameters on the same transformer, in the model's dtype
    since it is added after the policy's is cast to float32; divided as the transformer is
    under FSDP)."""
    out = []
    if config.feature_model:
        params = count_parameters(build_empty(model_config(config.feature_model)))
        uses = "the diversity signal" + (
            " and the diversity-aware advantage" if config.diversity_advantage else ""
        )
        out.append(Component(f"feature model: {config.feature_model}", params, "float32",
                             note=f"{uses}, in this process"))  # fmt: skip
    if config.kl_reference == "adapter":
        out.append(Component("reference adapter (GARDO)", lora // share, config.dtype,
                             note="frozen copy of the LoRA, reset to it"))  # fmt: skip
    return out


def _train_rewards(config: GRPOConfig) -> dict[str, dict]:
    """The training rewards as ``{name: constructor arguments}``."""
    return {name: (config.reward_kwargs or {}).get(name) or {} for name in config.rewards}


def _served_rewards(config: GRPOConfig, built: Collection[str]) -> dict[str, list[tuple]]:
    """``{server URL: [(reward, model name), ...]}`` of the rewards the config scores on a
    server, training and test rewards alike (a list of replicas is one entry per URL)."""
    served: dict[str, list[tuple]] = {}
    for rewards in (_train_rewards(config), config.separate_test_rewards()):
        for name, kwargs in rewards.items():
            urls = kwargs.get("server_url")
            if name in built or not urls:
                continue
            for url in [urls] if isinstance(urls, str) else urls:
                entry = (name, str(kwargs.get("model")))
                if entry not in served.setdefault(url, []):
                    served[url].append(entry)
    return served


def _server_weights(model: str) -> str:
    """What the served ``model``'s weights take on its GPU, where its architecture is known."""
    try:
        params = count_parameters(build_empty(model_config(model)))
    except ArchitectureError:
        return (
            f"weights not counted: {model!r} is a served name (plan with the model's hub id "
            "or folder as its `model` to count them)"
        )
    gib = params * dtype_bytes(SERVER_DTYPE) / GiB
    return f"{params / 1e9:.2f} B parameters, {gib:.1f} GiB of {SERVER_DTYPE} weights"


def reward_server_facts(
    config: GRPOConfig, num_processes: int, num_machines: int = 1, built: Collection[str] = ()
) -> dict[str, Any]:
    """A plan's facts about the reward servers ``config`` scores on: for each server URL,
    what it serves, who calls it and its weights. A loopback URL (``127.0.0.1``) is
    node-local: each node runs its own server on its own reward GPU (the paper's 7 + 1 on
    every node, ``recipes/launch_multinode.sh``), called by that node's processes only, so
    ``gpus_per_node`` counts one GPU per node-local server beside the training processes.
    Any other URL is one server that every process calls. No facts without a served reward.

    Example:
        >>> cfg = GRPOConfig.from_yaml("recipes/grpo_qwen_image_t2is.yaml")  # doctest: +SKIP
        >>> reward_server_facts(cfg, num_processes=14, num_machines=2)["gpus_per_node"]  # doctest: +SKIP
        8
    """
    served = _served_rewards(config, built)
    if not served:
        return {}
    per_node = num_processes // num_machines
    lines, local = [], 0
    for url, rewards in served.items():
        names = ", ".join(f"{reward} ({model})" for reward, model in rewards)
        weights = "; ".join(dict.fromkeys(_server_weights(model) for _, model in rewards))
        if is_loopback(urlsplit(url).hostname or ""):
            local += 1
            where = (
                f"node-local: one on each node's reward GPU ({num_machines} in all), each "
                f"called by its node's {per_node} process(es)"
            )
        else:
            where = f"one server, called by all {num_processes} process(es)"
        lines.append(f"{url} serves {names}: {where}; {weights}")
    return {
        "reward_servers": " | ".join(lines),
        "gpus_per_node": per_node + local,
    }


def plan_grpo(
    config: GRPOConfig,
    *,
    num_processes: int = 1,
    gpu_memory_gb: float | None = None,
    sharded: bool = False,
    built_rewards: Collection[str] = (),
    num_machines: int = 1,
    built_test_rewards: Collection[str] = (),
) -> Plan:
    """The memory of one training process of ``config`` launched on ``num_processes`` in
    all, over ``num_machines`` nodes (``sharded``: FSDP, the transformer and its LoRA states
    divided among them), and whether it fits ``gpu_memory_gb``; with the reward servers the
    config scores on (:func:`reward_server_facts`). The rewards named in ``built_rewards``
    are objects the caller built (``GRPOTrainer(config, rewards=...)``): listed, not
    counted, since their models need not be those ``config.reward_kwargs`` names; so are
    ``built_test_rewards`` (``test_rewards=...``). An evaluation reward built apart from the
    training ones (:meth:`GRPOConfig.separate_test_rewards`: another judge) is a ``test
    reward`` row.

    Raises:
        EpochShapeError: when the epoch does not split over ``num_processes``.
        ConfigError: when ``num_processes`` does not split over ``num_machines``.
        ArchitectureError: when the generator or a reward model has no known architecture.
    """
    nodes = node_facts(num_processes, num_machines)
    shape = EpochShape.from_config(config, num_processes)
    dtype = config.dtype
    torch_dtype = getattr(torch, dtype)
    configs = pipeline_configs(config.model_name_or_path)
    share = num_processes if sharded else 1
    split = f"1/{share} of it (FSDP)" if share > 1 else "frozen"
    components = []
    for name, cfg in configs.items():
        if name == "transformer":
            continue
        params = count_parameters(build_empty(cfg))
        kind = cfg.get("_class_name") or cfg["architectures"][0]
        components.append(Component(f"{name} ({kind})", params, dtype, note="frozen"))
    transformer = configs["transformer"]
    model = _meta_transformer(
        transformer, config.lora_r, config.lora_alpha, config.lora_target_modules, torch_dtype
    )
    lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    base = count_parameters(model) - lora
    components.insert(
        0,
        Component(f"transformer ({transformer['_class_name']})", base // share, dtype, note=split),
    )
    trained = [
        ("LoRA parameters", lora, f"r{config.lora_r} on {len(config.lora_target_modules)} projections"),
        ("LoRA gradients", lora, "float32, as the parameters"),
        ("AdamW states", 2 * lora, "two moments per parameter"),
    ]  # fmt: skip
    if config.use_ema:
        trained.append(("EMA of the LoRA", lora, f"decay {config.ema_decay}"))
    components += [
        Component(name, n // share, "float32", kind="trained", note=note)
        for name, n, note in trained
    ]
    components += gardo_components(config, lora, share)

    spec = get_pipeline_spec(config.pipeline)
    editing = spec.edits
    calls = transformer_calls(config)
    tokens = _tokens(config.train.resolution)
    forward = _forward(
        model, config.pipeline, transformer, config.per_device_train_batch_size, tokens,
        config.max_sequence_length, tokens if editing else 0, torch_dtype,
    )  # fmt: skip
    estimate = activation_bytes(model, forward, calls=calls)
    ckpt = config.gradient_checkpointing
    other = estimate.bytes(not ckpt) / GiB
    components.append(
        Component(
            f"activations: {config.per_device_train_batch_size} x {config.train.resolution}^2"
            f"{' + reference' if editing else ''}{', true CFG x2' if calls == 2 else ''}",
            0,
            dtype,
            bytes=estimate.bytes(ckpt),
            kind="activations",
            note=f"estimate, gradient checkpointing {'on' if ckpt else 'off'} "
            f"({'off' if ckpt else 'on'}: {other:.1f} GiB)",
        )  # fmt: skip
    )
    encodings, encodings_on_host = prompt_encodings(config, transformer, calls)
    components.append(encodings)
    components += _reward_components(_train_rewards(config), built_rewards)
    components += _reward_components(
        config.separate_test_rewards(), built_test_rewards, label="test reward"
    )

    memory = int(gpu_memory_gb * GiB) if gpu_memory_gb else None
    plan = Plan(
        f"{config.model_name_or_path} on {num_processes} process(es)",
        components,
        gpu_memory_bytes=memory,
        facts={
            "processes": num_processes,
            **nodes,
            **reward_server_facts(config, num_processes, num_machines, built_rewards),
            "images_per_process_per_epoch": shape.images_per_process,
            "micro_batch": config.per_device_train_batch_size,
            "gradient_accumulation_steps": shape.gradient_accumulation_steps,
            "optimizer_steps_per_epoch": shape.optimizer_steps_per_epoch,
            "text_tokens": config.max_sequence_length,
            "prompt_encodings_in_host_memory": encodings_on_host,
            "not_counted": "sampling and evaluation (no gradients; the VAE decode at the test "
            "resolution is transient), CUDA context and allocator caching (about 1-3 GiB)",
        },
    )
    if plan.fits is False:
        plan.advice = _advice(config, plan, editing, sharded)
    return plan


def _advice(config: GRPOConfig, plan: Plan, editing: bool, sharded: bool) -> list[str]:
    advice = []
    in_process = [c for c in plan.components if c.kind == "reward" and c.bytes]
    if in_process:
        gib = sum(c.bytes for c in in_process) / GiB
        advice.append(
            f"serve the rewards ({gib:.1f} GiB here): reward_kwargs.<name>.server_url, "
            "see recipes/serve_rewards.sh"
        )
    if not config.gradient_checkpointing:
        advice.append("gradient_checkpointing: true")
    if config.per_device_train_batch_size > 1:
        advice.append(
            f"a smaller per_device_train_batch_size (now {config.per_device_train_batch_size})"
        )
    if not sharded and not editing:
        advice.append("shard the transformer: recipes/accelerate/fsdp_grpo.yaml")
    return advice
