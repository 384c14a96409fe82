"""One LoRA SFT step of an evaluator recipe on a random model of the real architecture,
through the trainer's own loop: what the GPU check times and what the planner's activation
estimate is checked against.

The model is the recipe's shipped architecture (``benchmarks.gpu_check.build_reward_model``)
with random weights; :class:`~paco_reward.training.PacoSFTTrainer` trains it on synthetic
pairs of the recipe's shape (two random images filling its pixel budget, the consistency
instruction, an answer of :data:`~paco_reward.training.planning.ANSWER_TOKENS` tokens) with
the recipe's LoRA rank and targets, micro-batch, gradient checkpointing and mixed precision;
``Trainer.train`` runs the steps (one micro-batch and an optimizer step each). ``scale``
shrinks the widths and depths (the vocabulary too, the language model head's width), the
LoRA rank and the pixel budget, as ``--scale`` does in the GPU check.

:class:`SavedActivationMeter` counts the bytes autograd holds for the backward during a real
step (``torch.autograd.graph.saved_tensors_hooks``, each storage once, weights excluded), the
quantity :func:`paco_reward.planning.activation_bytes` estimates. With gradient
checkpointing the blocks' own tensors are saved inside ``torch.utils.checkpoint``, out of the
hooks' sight, and recomputed one block at a time by the backward: the meter records the
bytes held when the backward starts recomputing each block, and the block's own saved bytes
come from the same step without checkpointing (same weights, same batch).
``python -m benchmarks.sft_step`` prints measured against planned, with and without
checkpointing::

    python -m benchmarks.sft_step --scale 0.0625 --dtype bfloat16
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import TrainerCallback

from benchmarks.gpu_check import REWARD_ARCHITECTURES, SFT_RECIPE
from benchmarks.gpu_check import _depth as _scaled
from paco_reward.architectures import MODELS
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError

# The recipes' evaluator architectures, by the hub id a recipe names (gpu_check's keys).
ARCHITECTURES = {
    hub: Path(file).stem for hub, file in MODELS.items() if Path(file).stem in REWARD_ARCHITECTURES
}
# A long enough reason: the collator cuts the answer to the planned length.
REASON = "The first panel keeps the fox's red scarf and the second loses it. "


# ---------------------------------------------------------------------- the meter
class _Held:
    """What a saved tensor is packed into: it keeps the tensor, and its end (the graph freed
    it) tells the meter."""

    __slots__ = ("tensor", "key", "meter")

    def __init__(self, tensor: torch.Tensor, key: int, meter: SavedActivationMeter) -> None:
        self.tensor, self.key, self.meter = tensor, key, meter

    def __del__(self) -> None:
        self.meter._release(self.key)


class SavedActivationMeter:
    """The bytes autograd holds for the backward, while it runs: each storage once (a view
    costs nothing), the model's parameters and buffers not counted.

    ``peak``: the most held at once. ``by_block``: the bytes first saved inside each block of
    ``blocks`` (a ``ModuleList``; the rest under ``"outside"``). ``at_recompute``: for each
    block the backward re-ran (gradient checkpointing), the bytes held when it started.

    Example:
        >>> with SavedActivationMeter(model, model.model.language_model.layers) as meter:  # doctest: +SKIP
        ...     model(**batch).loss.backward()
        >>> meter.peak                                                                   # doctest: +SKIP
    """

    def __init__(self, model: torch.nn.Module, blocks: torch.nn.ModuleList) -> None:
        self.excluded = {_key(t) for t in [*model.parameters(), *model.buffers()]}
        self.blocks = blocks
        self.held: dict[int, list[int]] = {}  # storage -> [bytes, references]
        self.current = self.peak = 0
        self.by_block: dict[int | str, int] = {}
        self.at_recompute: dict[int, int] = {}
        self._scope: list[int | str] = ["outside"]
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> SavedActivationMeter:
        for index, block in enumerate(self.blocks):
            handles = [
                block.register_forward_pre_hook(lambda m, a, i=index: self._enter(i)),
                block.register_forward_hook(lambda m, a, o: self._leave()),
            ]
            # A checkpointed block's recompute calls its children, not the block's hooks.
            handles += [
                child.register_forward_pre_hook(lambda m, a, i=index: self._recomputing(i))
                for child in block.children()
            ]
            for handle in handles:
                self._stack.callback(handle.remove)
        self._stack.enter_context(torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def _enter(self, block: int) -> None:
        self._scope.append(block)

    def _leave(self) -> None:
        self._scope.pop()

    def _recomputing(self, block: int) -> None:
        if torch._C._current_graph_task_id() != -1 and block not in self.at_recompute:
            self.at_recompute[block] = self.current  # in a backward: the recompute starts

    def _pack(self, tensor: torch.Tensor) -> Any:
        key = _key(tensor)
        if key in self.excluded:
            return tensor
        if key in self.held:
            self.held[key][1] += 1
        else:
            size = tensor.untyped_storage().nbytes()
            self.held[key] = [size, 1]
            self.current += size
            self.peak = max(self.peak, self.current)
            scope = self._scope[-1]
            self.by_block[scope] = self.by_block.get(scope, 0) + size
        return _Held(tensor, key, self)

    def _release(self, key: int) -> None:
        entry = self.held[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.held[key]


def _key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _unpack(value: Any) -> torch.Tensor:
    return value.tensor if isinstance(value, _Held) else value


def checkpointed_peak(with_checkpointing: SavedActivationMeter,
                      without: SavedActivationMeter) -> int:  # fmt: skip
    """The saved bytes' peak of a checkpointed step: the larger of what its forward left
    (``with_checkpointing.peak``, the blocks' insides out of sight) and, for each block the
    backward recomputed, what was held then plus what that block saves (measured in the same
    step ``without`` checkpointing)."""
    recomputes = [
        held + without.by_block[block] for block, held in with_checkpointing.at_recompute.items()
    ]
    return max([with_checkpointing.peak, *recomputes])


# ---------------------------------------------------------------------- the step
@dataclass
class SFTStep:
    """A trainer ready to run steps of a recipe's shape: ``trainer`` (its model random, of
    the recipe's architecture at ``scale``, training on one micro-batch of synthetic pairs),
    ``architecture`` (the model's config as the planner reads it) and ``tokens`` of one pair
    (``prompt``, ``image`` per image, ``answer``)."""

    trainer: Any
    architecture: dict[str, Any]
    tokens: dict[str, int]
    image_side: int

    @property
    def shape(self):
        from paco_reward.training.planning import SFTShape

        t = self.tokens
        return SFTShape(t["image"], prompt_tokens=t["prompt"], answer_tokens=t["answer"])

    @property
    def language_model_layers(self) -> torch.nn.ModuleList:
        base = self.trainer.model.get_base_model()
        return base.get_decoder().layers


def pair_rows(count: int, side: int, seed: int = 0):
    """A ``datasets.Dataset`` of ``count`` pair-schema rows: two random ``side`` px images
    each (smooth, so their PNG coding is quick), the consistency template, alternating labels
    and a long reason."""
    import datasets

    rng = np.random.default_rng(seed)

    def image() -> Image.Image:
        coarse = Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
        return coarse.resize((side, side), Image.BILINEAR)

    return datasets.Dataset.from_list([
        {
            "image_a": image(),
            "image_b": image(),
            "template": "consistency",
            "prompt": "a red fox in a snowy forest, storybook style",
            "label": k % 2,
            "reasons": REASON * 40,
        }
        for k in range(count)
    ])  # fmt: skip


@contextlib.contextmanager
def open_sft_step(recipe: str | Path, *, scale: float, device: torch.device,
                  dtype: torch.dtype, overrides: Mapping[str, Any] | None = None,
                  seed: int = 0) -> Iterator[SFTStep]:  # fmt: skip
    """The trainer of ``recipe`` (``{"key": value}`` ``overrides`` on top) on a random model of
    its architecture at ``scale`` on ``device``, weights in ``dtype`` (bfloat16: the
    recipe's mixed precision too; float32: none), for one micro-batch of synthetic pairs; its
    output folder is temporary, and accelerate's process state is reset on the way out (the
    next trainer may use another mixed precision).

    Example:
        >>> with open_sft_step("recipes/paco_reward_7b_lora.yaml", scale=0.0625,
        ...                    device=torch.device("cpu"), dtype=torch.float32) as step:  # doctest: +SKIP
        ...     seconds = run_steps(step, 2)[0].seconds
    """
    from accelerate.state import AcceleratorState

    with tempfile.TemporaryDirectory(prefix="sft-step-") as folder:
        step = _build(recipe, scale, device, dtype, folder, dict(overrides or {}), seed)
        try:
            yield step
        finally:
            step.trainer.accelerator.free_memory()
            AcceleratorState._reset_state()
            del step
            gc.collect()


def _build(recipe: str | Path, scale: float, device: torch.device, dtype: torch.dtype,
           output_dir: str, overrides: dict[str, Any], seed: int) -> SFTStep:  # fmt: skip
    from benchmarks.gpu_check import build_reward_model
    from paco_reward.images import ImagePolicy
    from paco_reward.training import PacoSFTCollator, PacoSFTConfig, PacoSFTTrainer
    from paco_reward.training.callbacks import MetricsFileCallback
    from paco_reward.training.loading import lora_config
    from paco_reward.training.planning import ANSWER_TOKENS, DEFAULT_MAX_PIXELS

    recipe_cfg = PacoSFTConfig.from_yaml(recipe, {"use_cpu": True, **overrides})
    if recipe_cfg.model_name_or_path not in ARCHITECTURES:
        raise ConfigError(
            f"{recipe}: no shipped evaluator architecture for {recipe_cfg.model_name_or_path!r}; "
            f"known: {sorted(ARCHITECTURES)}."
        )
    torch.manual_seed(seed)
    model, processor, config = build_reward_model(
        scale, device, dtype, ARCHITECTURES[recipe_cfg.model_name_or_path]
    )
    if scale < 1:  # the head's width shrinks like the others, down to the tokenizer's ids
        text = model.config.get_text_config()
        model.resize_token_embeddings(
            max(len(processor.tokenizer), _scaled(text.vocab_size, scale))
        )
    model.requires_grad_(False)  # as load_model_and_processor leaves it for LoRA
    pixels = _scaled(recipe_cfg.image_max_pixels or DEFAULT_MAX_PIXELS[config["model_type"]], scale)
    factor = ImagePolicy.from_processor(processor).factor
    side = max(factor, math.isqrt(pixels) // factor * factor)  # fills the budget, no resize
    rows = pair_rows(recipe_cfg.per_device_train_batch_size, side, seed)
    # The prompt's length with the images; the answer is cut to ANSWER_TOKENS by max_length.
    probe = PacoSFTCollator(processor, max_pixels=pixels)([rows[0]])
    prompt_and_images = int(probe["labels"][0].eq(-100).sum())
    image_tokens = int(probe["image_grid_thw"][0].prod()) // processor.image_processor.merge_size**2
    mixed = dtype == torch.bfloat16
    cfg = PacoSFTConfig.from_yaml(recipe, {
        "output_dir": output_dir, "use_cpu": device.type == "cpu", "report_to": "none",
        "save_strategy": "no", "eval_strategy": "no", "save_merged": False,
        "disable_tqdm": True, "logging_steps": 1000, "dataloader_num_workers": 0,
        "gradient_accumulation_steps": 1, "seed": seed, "bf16": mixed,
        "dtype": "bfloat16" if mixed else "float32",
        "lora_r": _scaled(recipe_cfg.lora_r, scale),
        "lora_alpha": _scaled(recipe_cfg.lora_alpha, scale),
        "image_max_pixels": pixels, "image_min_pixels": min(pixels, factor**2),
        "max_length": prompt_and_images + ANSWER_TOKENS, **overrides,
    })  # fmt: skip
    trainer = PacoSFTTrainer(model, cfg, train_dataset=rows, processing_class=processor,
                             peft_config=lora_config(cfg, model))  # fmt: skip
    trainer.remove_callback(MetricsFileCallback)  # no metrics files or loss plot to write
    tokens = {"prompt": prompt_and_images - 2 * image_tokens, "image": image_tokens,
              "answer": ANSWER_TOKENS}  # fmt: skip
    return SFTStep(trainer, model.config.to_dict(), tokens, side)


class _Steps(TrainerCallback):
    """Times each optimizer step (the device synchronised) and, from the second (the first
    after the warm-up) on, tracks the device's peak memory; meters the steps in ``metered``."""

    def __init__(self, device: torch.device,
                 metered: dict[int, SavedActivationMeter] | None = None) -> None:  # fmt: skip
        self.device = device
        self.metered = metered or {}
        self.seconds: list[float] = []
        self.peak: int | None = None
        self._start = 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 1 and self.device.type == "cuda":
            self._sync()
            torch.cuda.reset_peak_memory_stats(self.device)
        if state.global_step in self.metered:
            self.metered[state.global_step].__enter__()
        self._sync()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        self.seconds.append(time.perf_counter() - self._start)
        if state.global_step - 1 in self.metered:
            self.metered[state.global_step - 1].__exit__(None, None, None)
        if self.device.type == "cuda":
            self.peak = int(torch.cuda.max_memory_allocated(self.device))


def run_steps(step: SFTStep, steps: int, metered: tuple[int, ...] = ()
              ) -> tuple[_Steps, dict[int, SavedActivationMeter]]:  # fmt: skip
    """``Trainer.train`` for ``steps`` optimizer steps; the steps in ``metered`` (0-based)
    under a :class:`SavedActivationMeter` of the language model's layers."""
    trainer = step.trainer
    meters = {i: SavedActivationMeter(trainer.model, step.language_model_layers) for i in metered}
    device = trainer.args.device
    callback = _Steps(device, meters)
    trainer.args.max_steps = steps
    trainer.add_callback(callback)
    try:
        trainer.train()
    finally:
        trainer.remove_callback(callback)
    return callback, meters


# ---------------------------------------------------------------------- the GPU check's row
def measure_sft(args, device: torch.device, recipe: str | Path) -> dict[str, Any]:
    """The GPU check's row for the SFT ``recipe`` (``args``: its ``GpuCheckArguments``):
    s/step (median and interquartile range of ``args.train_steps`` steps after a warm-up
    step) and peak allocated memory of the trainer's LoRA step at ``args.scale`` on
    ``device``, next to :func:`~paco_reward.training.planning.plan_sft` for the same launch
    (one process, the measured pair's tokens) and their ratio. Weights in ``args.dtype``
    (default: bfloat16, the recipes' mixed precision, on a GPU; float32 on a CPU)."""
    from paco_reward.planning import GiB, gpu_memory_bytes
    from paco_reward.training.planning import plan_sft

    dtype_name = args.dtype or ("float32" if device.type == "cpu" else "bfloat16")
    start = time.perf_counter()
    with open_sft_step(recipe, scale=args.scale, device=device, dtype=getattr(torch, dtype_name),
                       overrides={"logging_steps": 1}) as step:  # fmt: skip
        trainer, cfg = step.trainer, step.trainer.args
        build_seconds = time.perf_counter() - start
        trained = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
        # LoRA B starts at zero: only a gradient step can move it.
        before = {n: p.detach().to("cpu", copy=True) for n, p in trained.items() if ".lora_B." in n}
        steps, _ = run_steps(step, 1 + args.train_steps)
        change = max(float((trained[n].detach().cpu() - b).abs().max()) for n, b in before.items())
        memory = gpu_memory_bytes(device)
        plan = plan_sft(cfg, num_processes=1, gpu_memory_gb=memory / GiB if memory else None,
                        architecture=step.architecture, shape=step.shape)  # fmt: skip
    timed = steps.seconds[1:]
    planned = {c.name.split(":")[0]: c.bytes for c in plan.components}
    total = plan.per_process_bytes
    peak = steps.peak
    return {
        "recipe": str(recipe),
        "model": cfg.model_name_or_path,
        "architecture": step.architecture["architectures"][0],
        "dtype": dtype_name,
        "mixed_precision": "bf16" if cfg.bf16 else "no",
        "parameters": sum(p.numel() for p in trainer.model.parameters() if not p.requires_grad),
        "lora_parameters": sum(p.numel() for p in trained.values()),
        "lora_r": cfg.lora_r,
        "lora_alpha": cfg.lora_alpha,
        "lora_target_modules": list(cfg.lora_target_modules),
        "layers": {
            "text": len(step.language_model_layers),
            "vision": step.architecture["vision_config"]["depth"],
        },  # fmt: skip
        "batch_size": cfg.per_device_train_batch_size,
        "pixels_per_image": step.image_side**2,
        "image_max_pixels": cfg.image_max_pixels,
        "tokens": {**step.tokens, "per_pair": step.shape.length},
        "gradient_checkpointing": bool(cfg.gradient_checkpointing),
        "build_seconds": build_seconds,
        "warm_up_seconds": steps.seconds[0],
        "step_seconds": timed,
        "seconds_per_step": float(np.median(timed)),
        "seconds_per_step_iqr": [float(q) for q in np.percentile(timed, [25, 75])],
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
        "lora_b_max_abs_change": change,
        "lora_changed": change > 0,
        "peak_memory_bytes": peak,
        "planned": {
            "source": "paco_reward.training.planning.plan_sft",
            "components": planned,
            "total_bytes": total,
        },
        "measured_over_planned": peak / total if peak is not None else None,
    }


def sft_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The GPU check's SFT rows as a markdown table (lines), failed ones named below it."""
    if not rows:
        return []
    from benchmarks.gpu_check import _count, _size

    lines = [
        "LoRA SFT step per recipe (the trainer's own step: micro-batch, LoRA, pixel budget, "
        "checkpointing as the recipe; tokens per pair: prompt + images + answer)",
        "",
        "| recipe | evaluator | LoRA | micro-batch | tokens per pair | checkpointing "
        "| s/step (IQR) | loss | peak memory | planned | measured / planned |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    failed = []
    for r in rows:
        if "error" in r:
            failed.append(r)
            lines.append(f"| {Path(r['recipe']).name} | failed | | | | | | | | | |")
            continue
        t, ratio, (q1, q3) = r["tokens"], r["measured_over_planned"], r["seconds_per_step_iqr"]
        loss = f"{r['losses'][-1]:.4g}" if r["losses"] else ""
        lines.append(
            f"| {Path(r['recipe']).name} | {r['model']} ({_count(r['parameters'])}) | "
            f"r{r['lora_r']}: {_count(r['lora_parameters'])} | {r['batch_size']} | "
            f"{t['prompt']} + 2 x {t['image']} + {t['answer']} | "
            f"{'on' if r['gradient_checkpointing'] else 'off'} | "
            f"{r['seconds_per_step']:.3f} ({q1:.3f}-{q3:.3f}) | {loss} | "
            f"{_size(r['peak_memory_bytes'])} | {_size(r['planned']['total_bytes'])} | "
            + ("n/a |" if ratio is None else f"{ratio:.2f} |")
        )
    lines.append("")
    for r in failed:
        lines += [f"SFT step of {r['recipe']} failed: {r['error']}", ""]
    ok = [r for r in rows if "error" not in r]
    if ok:
        names = dict.fromkeys(n for r in ok for n in r["planned"]["components"])
        lines += ["| planned component | " + " | ".join(Path(r["recipe"]).name for r in ok) + " |",
                  "|---|" + "---:|" * len(ok)]  # fmt: skip
        for name in names:
            cells = [r["planned"]["components"].get(name) for r in ok]
            lines.append(f"| {name} | " + " | ".join(
                "" if c is None else _size(c) for c in cells) + " |")  # fmt: skip
        lines.append("")
    return lines


# ---------------------------------------------------------------------- the planner check
@dataclass
class SFTStepArguments:
    """Saved activations of a recipe's SFT step against the planner's estimate, on the CPU."""

    recipe: str = config_field(str(SFT_RECIPE), help="SFT recipe (its evaluator, LoRA, shape).")
    scale: float = config_field(0.0625, help="Shrink widths, depths, LoRA rank and pixels.")
    dtype: str = config_field(
        "bfloat16", help="bfloat16 (the recipes' mixed precision) or float32 (none)."
    )
    batch_size: int | None = config_field(
        None, help="Pairs per micro-batch (default: the recipe's per_device_train_batch_size)."
    )

    def __post_init__(self) -> None:
        if self.dtype not in ("bfloat16", "float32"):
            raise ConfigError(f"--dtype must be bfloat16 or float32; got {self.dtype!r}.")


def saved_activations(args: SFTStepArguments) -> list[dict[str, Any]]:
    """Measured and planned saved bytes of one step of ``args.recipe``, without then with
    gradient checkpointing (the planner: :func:`~paco_reward.training.planning.sft_activation_estimate`
    for the measured shape)."""
    from paco_reward.training.planning import sft_activation_estimate

    overrides = {} if args.batch_size is None else {"per_device_train_batch_size": args.batch_size}
    rows, meters = [], {}
    for checkpointing in (False, True):
        with open_sft_step(
            args.recipe, scale=args.scale, device=torch.device("cpu"),
            dtype=getattr(torch, args.dtype),
            overrides={**overrides, "gradient_checkpointing": checkpointing},
        ) as step:  # fmt: skip
            _, metered = run_steps(step, 1, metered=(0,))
            meter = meters[checkpointing] = metered[0]
            cfg = step.trainer.args
            estimate = sft_activation_estimate(cfg, architecture=step.architecture,
                                               shape=step.shape)  # fmt: skip
        planned = (
            estimate.saved_with_checkpointing
            if checkpointing
            else estimate.saved_without_checkpointing
        )
        measured = checkpointed_peak(meter, meters[False]) if checkpointing else meter.peak
        rows.append({
            "recipe": str(args.recipe), "scale": args.scale, "dtype": args.dtype,
            "batch_size": cfg.per_device_train_batch_size, "tokens": step.tokens,
            "gradient_checkpointing": checkpointing, "measured_bytes": measured,
            "planned_bytes": planned, "error": (planned - measured) / measured,
            "measured_by_block": {str(k): v for k, v in meter.by_block.items()},
            "held_at_recompute": {str(k): v for k, v in meter.at_recompute.items()},
        })  # fmt: skip
    return rows


def _run(args: SFTStepArguments) -> int:
    rows = saved_activations(args)
    print("| checkpointing | micro-batch | tokens (prompt + 2 x image + answer) | measured MiB "
          "| planned MiB | error |\n|---|---:|---:|---:|---:|---:|")  # fmt: skip
    for r in rows:
        t = r["tokens"]
        print(f"| {'on' if r['gradient_checkpointing'] else 'off'} | {r['batch_size']} | "
              f"{t['prompt']} + 2 x {t['image']} + {t['answer']} | "
              f"{r['measured_bytes'] / 2**20:.1f} | {r['planned_bytes'] / 2**20:.1f} | "
              f"{100 * r['error']:+.1f} % |")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    command = Command("sft_step", SFTStepArguments, _run, __doc__.splitlines()[0])
    return run_cli("python -m benchmarks.sft_step", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
