"""``GRPOTrainer``: Flow-GRPO fine-tuning of a FLUX LoRA on image sets (PaCo-GRPO).

Per epoch (one "round"):

1. **Sample** ``group_size`` images for each of ``prompts_per_epoch`` prompts with the
   current (behaviour) policy, SDE noise only at ``train.noise_steps``, recording the
   latents before/after those steps and their log-probabilities.
2. **Reward** every image with each configured reward (NaN = failed item); with
   ``async_rewards`` (default) a batch is scored on a background event loop while the next
   one is sampled (:mod:`paco_grpo.async_rewards`), and ``time/reward_wait`` /
   ``time/reward_share`` log how much of the step was spent waiting on rewards.
3. **Advantages**: aggregate the rewards (log taming by default), centre per prompt
   group, scale by the global or per-group std; gathered over all processes.
4. **Train** only the noise steps with the clipped PPO objective (advantages clipped to
   ``±adv_clip_max``) plus ``beta`` x KL to the frozen base (computed even at beta = 0).
   An EMA of the LoRA weights is stepped once per optimizer step.

Every ``test.every`` epochs the EMA weights are evaluated with ODE sampling at
``test.resolution`` and the test rewards. Checkpoints hold the LoRA adapter (diffusers
format, loadable with ``FluxPipeline.load_lora_weights``), optimizer, scheduler, EMA,
epoch and RNG states; ``resume_from`` continues bit for bit on CPU.

    >>> from paco_grpo import GRPOConfig, GRPOTrainer                     # doctest: +SKIP
    >>> cfg = GRPOConfig.from_yaml("recipes/grpo_tiny_cpu.yaml")           # doctest: +SKIP
    >>> history = GRPOTrainer(cfg).train()                                 # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from paco_grpo.advantages import compute_advantages
from paco_grpo.async_rewards import AsyncRewardRunner, compute_rewards
from paco_grpo.data import PromptItem, load_prompts
from paco_grpo.edit_pipeline import EDIT_SAMPLERS, prepare_edit_items
from paco_grpo.grpo_config import EDIT_PIPELINES, GRPOConfig
from paco_grpo.pipeline import FlowGRPOSampler
from paco_grpo.rewards import Reward, build_rewards
from paco_grpo.sde import sde_step
from paco_reward.atomic_io import atomic_write_bytes, atomic_write_text, save_figure

logger = logging.getLogger(__name__)

__all__ = ["GRPOTrainer", "grpo_loss", "plot_reward_curve"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LORA_WEIGHT_NAME = "pytorch_lora_weights.safetensors"


def _seed(*parts: int) -> int:
    """A deterministic 63-bit seed from integers (epoch, rank, ...)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, np.uint64)[0] >> 1)


class GRPOTrainer:
    """Flow-GRPO trainer for a FLUX pipeline with a LoRA adapter.

    Args:
        config: the :class:`GRPOConfig`.
        rewards: ``{name: reward}``; default: built from ``config.rewards`` via the registry.
        test_rewards: rewards for evaluation; default: ``config.test.rewards`` (or ``rewards``).
        pipeline: an already loaded ``FluxPipeline`` (default: ``from_pretrained``).
    """

    def __init__(
        self,
        config: GRPOConfig,
        rewards: dict[str, Reward] | None = None,
        test_rewards: dict[str, Reward] | None = None,
        pipeline=None,
    ) -> None:
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        self.config = cfg = config
        self.output_dir = Path(cfg.output_dir)

        # --- accelerator and seeding
        self.accelerator = Accelerator(mixed_precision=cfg.mixed_precision)
        set_seed(cfg.seed)
        self.rank = self.accelerator.process_index
        self.world = self.accelerator.num_processes
        if cfg.prompts_per_epoch % self.world:
            raise ValueError(
                f"prompts_per_epoch ({cfg.prompts_per_epoch}) must be divisible by the number of "
                f"processes ({self.world})."
            )

        # --- data
        self.items = load_prompts(cfg.prompt_file, cfg.prompt_format, cfg.layout)
        test_file = cfg.test.prompt_file or cfg.prompt_file
        self.test_items = load_prompts(test_file, cfg.prompt_format, cfg.layout)
        if cfg.test.num_prompts:
            self.test_items = self.test_items[: cfg.test.num_prompts]

        # --- rewards (names resolve to classes here only when the caller passed none)
        self.rewards = (
            rewards if rewards is not None else build_rewards(cfg.rewards, cfg.reward_kwargs)
        )
        missing = sorted(set(cfg.rewards) - set(self.rewards))
        if missing:
            raise ValueError(f"config.rewards names {missing} but no such reward was passed.")
        self.test_weights = cfg.test.rewards or cfg.rewards
        if test_rewards is None:
            if cfg.test.rewards is None and cfg.test.reward_kwargs is None:
                test_rewards = self.rewards
            else:
                test_rewards = build_rewards(
                    self.test_weights, cfg.test.reward_kwargs or cfg.reward_kwargs
                )
        self.test_rewards = test_rewards

        # --- pipeline, frozen parts, LoRA, sampler
        self.editing = cfg.pipeline in EDIT_PIPELINES
        self.pipe = pipeline if pipeline is not None else self._load_pipeline()
        if self.editing:
            expected = EDIT_SAMPLERS[cfg.pipeline][1]
            if expected not in {c.__name__ for c in type(self.pipe).__mro__}:
                raise ValueError(
                    f"config.pipeline={cfg.pipeline!r} needs a diffusers {expected}; got a "
                    f"{type(self.pipe).__name__}. Set `pipeline:` to the model's type."
                )
        self.pipe.set_progress_bar_config(disable=True)
        self.transformer = self._add_lora(self.pipe.transformer)
        self.sampler = self._build_sampler()
        if self.editing:  # references resized to each resolution's area, once
            self.items = self._edit_items(self.items, cfg.train.resolution)
            self.test_items = self._edit_items(self.test_items, cfg.test.resolution)
        self.params = [p for p in self.transformer.parameters() if p.requires_grad]

        # --- optimizer, scheduler, EMA
        from diffusers.training_utils import EMAModel
        from transformers import get_scheduler

        optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.learning_rate,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon,
            weight_decay=cfg.weight_decay,
        )
        steps_per_epoch = math.ceil(
            math.ceil(cfg.prompts_per_epoch // self.world * cfg.group_size / cfg.train_batch_size)
            * cfg.num_inner_epochs
            / cfg.gradient_accumulation_steps
        )
        lr_scheduler = get_scheduler(
            cfg.lr_scheduler,
            optimizer,
            num_warmup_steps=cfg.warmup_steps,
            num_training_steps=steps_per_epoch * cfg.max_epochs,
        )
        self.model, self.optimizer, self.lr_scheduler = self.accelerator.prepare(
            self.transformer, optimizer, lr_scheduler
        )
        self.ema = EMAModel(self.params, decay=cfg.ema_decay) if cfg.ema else None

        # --- logging state
        self.start_epoch = 0
        self.history: list[dict] = []
        self._writer = None
        self._epoch_images: list[torch.Tensor] = []
        if cfg.resume_from:
            self.load_checkpoint(self._resolve_checkpoint(cfg.resume_from))

    # ================================================================== setup helpers
    def _load_pipeline(self):
        import diffusers

        name = EDIT_SAMPLERS[self.config.pipeline][1] if self.editing else "FluxPipeline"
        pipe = getattr(diffusers, name).from_pretrained(
            self.config.model_name_or_path, dtype=_DTYPES[self.config.dtype]
        )
        return pipe.to(self.accelerator.device)

    def _build_sampler(self):
        cfg = self.config
        if not self.editing:
            return FlowGRPOSampler(self.pipe, max_sequence_length=cfg.max_sequence_length)
        sampler_cls = EDIT_SAMPLERS[cfg.pipeline][0]
        kwargs = (
            {"negative_prompt": cfg.negative_prompt} if cfg.pipeline == "qwen_image_edit" else {}
        )
        return sampler_cls(self.pipe, max_sequence_length=cfg.max_sequence_length, **kwargs)

    def _edit_items(self, items: list[PromptItem], resolution: int) -> list[PromptItem]:
        """Editing items with their reference resized to ``resolution**2`` pixels (or the item's
        height x width with ``item_resolution_overrides``), aspect ratio preserved."""
        areas = [
            int(it.height) * int(it.width)
            if self.config.item_resolution_overrides and it.height and it.width
            else resolution * resolution
            for it in items
        ]
        return prepare_edit_items(items, areas, self.sampler.size_multiple)

    def _add_lora(self, transformer):
        from diffusers.training_utils import cast_training_params
        from peft import LoraConfig

        cfg = self.config
        for module in [*self.pipe.components.values(), transformer]:
            if isinstance(module, torch.nn.Module):
                module.requires_grad_(False)
        targets = [
            name
            for name, _ in transformer.named_modules()
            if any(name.endswith(t) for t in cfg.lora_target_modules)
        ]
        if not targets:
            raise ValueError(
                f"lora_target_modules {cfg.lora_target_modules} match no module of the transformer."
            )
        torch.manual_seed(cfg.seed)
        transformer.add_adapter(
            LoraConfig(
                r=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,
                init_lora_weights=cfg.lora_init,
                target_modules=cfg.lora_target_modules,
                lora_dropout=0.0,
            )
        )
        cast_training_params(transformer, dtype=torch.float32)
        if cfg.gradient_checkpointing:
            transformer.enable_gradient_checkpointing()
        return transformer

    def _resolution(self, item: PromptItem, default: int) -> tuple[int, int]:
        if self.editing:  # an edit has its (resized) reference's size
            reference = item.metadata["source_image"]
            return reference.height, reference.width
        if self.config.item_resolution_overrides and item.height and item.width:
            return int(item.height), int(item.width)
        return default, default

    def group_key(self, item: PromptItem) -> str | tuple[str, str]:
        """GRPO group of an item's samples: the prompt id, and for editing ``(prompt id,
        image hash)`` (one instruction applied to different images is different groups).

        Example:
            >>> trainer.group_key(trainer.items[0])       # doctest: +SKIP
            ('0', '3f1c...')
        """
        if self.editing:
            return (item.id, item.metadata["source_image_hash"])
        return item.id

    def _sample(
        self,
        items: list[PromptItem],
        size: tuple[int, int],
        section,
        generator,
        transformer,
        noise: bool,
    ):
        """One sampling call of the policy for ``items`` at ``size`` (SDE at the train noise
        steps when ``noise``, else ODE); editing policies get each item's reference image."""
        tc = self.config.train
        kwargs = {
            "num_steps": section.num_steps,
            "guidance_scale": section.guidance_scale,
            "noise_level": tc.noise_level if noise else 0.0,
            "noise_steps": tc.noise_steps if noise else [],
            "generator": generator,
            "transformer": transformer,
        }
        prompts = [it.prompt for it in items]
        if self.editing:
            references = [it.metadata["source_image"] for it in items]
            return self.sampler(prompts, references, area=None, **kwargs)
        return self.sampler(prompts, height=size[0], width=size[1], **kwargs)

    def _velocity(self, model, x, timesteps, items: list[PromptItem], size: tuple[int, int]):
        """The policy's velocity for recorded latents ``x`` of ``items`` (conditioning cached)."""
        guidance = self.config.train.guidance_scale
        prompts = [it.prompt for it in items]
        if self.editing:
            references = [it.metadata["source_image"] for it in items]
            cond = self.sampler.condition(prompts, references, size[0], size[1])
            return self.sampler.velocity(model, x, timesteps, cond, guidance)
        cond = self.sampler.encode_prompts(prompts)
        img_ids = self.sampler.latent_ids(
            size[0], size[1], self.accelerator.device, cond.prompt_embeds.dtype
        )
        return self.sampler.velocity(model, x, timesteps, cond, img_ids, guidance)

    # ================================================================== rewards
    @staticmethod
    def _reward_inputs(images, items: list[PromptItem]) -> tuple[list, list[str], list[dict]]:
        """What a reward sees: float CHW CPU images in [0, 1], prompt texts, item metadata."""
        return (
            [img.detach().float().cpu() for img in images],
            [it.prompt for it in items],
            [it.metadata for it in items],
        )

    def compute_rewards(
        self, rewards: dict[str, Reward], images: torch.Tensor, items: list[PromptItem]
    ) -> dict[str, np.ndarray]:
        """Run each reward on a batch of images (float CHW in [0, 1]) in this thread."""
        return compute_rewards(rewards, *self._reward_inputs(images, items)).scores

    # ================================================================== sampling
    def sample_epoch(self, epoch: int) -> tuple[list[dict], dict[str, np.ndarray], list[int], dict]:
        """Sample this process's share of the epoch and score it.

        With ``async_rewards`` each batch's rewards are computed on a background event loop
        (:class:`~paco_grpo.async_rewards.AsyncRewardRunner`) while the next batch is sampled;
        only the time spent blocked on them counts as ``reward_wait``. Returns ``(samples,
        rewards, group_ids, timings)``: one dict per sample with its recorded transition;
        rewards ``{name: (n,)}``; the prompt index of each sample; timings ``sampling``,
        ``reward_wait`` and ``reward_compute`` in seconds.
        """
        runner = AsyncRewardRunner(self.rewards) if self.config.async_rewards else None
        try:
            return self._sample_epoch(epoch, runner)
        finally:
            if runner is not None:
                runner.close()

    def _sample_epoch(self, epoch: int, runner: AsyncRewardRunner | None):
        cfg, tc = self.config, self.config.train
        rng = np.random.default_rng(_seed(cfg.seed, epoch))
        chosen = rng.choice(
            len(self.items),
            size=cfg.prompts_per_epoch,
            replace=cfg.prompts_per_epoch > len(self.items),
        )
        mine = [int(i) for i in chosen[self.rank :: self.world]]
        flat = [i for i in mine for _ in range(cfg.group_size)]
        flat.sort(key=lambda i: self._resolution(self.items[i], tc.resolution))  # stable
        generator = torch.Generator(self.accelerator.device).manual_seed(
            _seed(cfg.seed, epoch, self.rank, 1)
        )
        samples, pending = [], []  # pending: a RewardBatch (sync) or its future (async) per batch
        timings = {"sampling": 0.0, "reward_wait": 0.0, "reward_compute": 0.0}
        self._epoch_images = []
        unwrapped = self.accelerator.unwrap_model(self.model)
        unwrapped.eval()
        for start in range(0, len(flat), cfg.sample_batch_size):
            chunk = flat[start : start + cfg.sample_batch_size]
            sizes = {self._resolution(self.items[i], tc.resolution) for i in chunk}
            for size in sorted(sizes):
                part = [i for i in chunk if self._resolution(self.items[i], tc.resolution) == size]
                t0 = time.perf_counter()
                with self.accelerator.autocast():
                    out = self._sample(
                        [self.items[i] for i in part], size, tc, generator, unwrapped, noise=True
                    )
                t1 = time.perf_counter()
                inputs = self._reward_inputs(out.images, [self.items[i] for i in part])
                if runner is None:
                    pending.append(compute_rewards(self.rewards, *inputs))
                else:
                    pending.append(runner.submit(*inputs))
                    runner.raise_if_failed()  # a failed earlier batch stops the epoch now
                timings["sampling"] += t1 - t0
                timings["reward_wait"] += time.perf_counter() - t1
                if len(self._epoch_images) < cfg.num_sample_images:
                    self._epoch_images.extend(
                        out.images[: cfg.num_sample_images - len(self._epoch_images)]
                    )
                for b, item_index in enumerate(part):
                    samples.append(
                        {
                            "item": item_index,
                            "size": size,
                            "latents": out.noise_latents[b].detach(),
                            "next_latents": out.noise_next_latents[b].detach(),
                            "log_probs": out.log_probs[b].detach().float(),
                            "timesteps": out.schedule.timesteps[out.noise_steps],
                            "sigmas": out.schedule.sigmas[out.noise_steps],
                            "sigmas_next": out.schedule.sigmas[[s + 1 for s in out.noise_steps]],
                            "sigma_max": out.schedule.sigma_max,
                        }
                    )
        t2 = time.perf_counter()
        batches = [p if runner is None else p.result() for p in pending]  # re-raises
        timings["reward_wait"] += time.perf_counter() - t2
        timings["reward_compute"] = sum(b.seconds for b in batches)
        rewards = {
            n: np.concatenate([b.scores[n] for b in batches]) if batches else np.zeros(0)
            for n in self.rewards
        }
        return samples, rewards, [s["item"] for s in samples], timings

    # ================================================================== training
    def _transition(self, model, batch: dict, j: int):
        """``(log_prob, mean, std)`` of the recorded transition ``j`` under ``model``."""
        x = batch["latents"][:, j]
        items = [self.items[i] for i in batch["items"]]
        v = self._velocity(model, x, batch["timesteps"][:, j], items, batch["size"])
        _, log_prob, mean, std = sde_step(
            x,
            v,
            batch["sigmas"][:, j],
            batch["sigmas_next"][:, j],
            self.config.train.noise_level,
            batch["sigma_max"],
            prev_sample=batch["next_latents"][:, j],
        )
        return log_prob, mean, std

    @torch.no_grad()
    def _reference_mean(self, batch: dict, j: int) -> torch.Tensor:
        """The frozen base model's step mean (LoRA disabled) for the KL term."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        unwrapped.disable_adapters()
        try:
            return self._transition(unwrapped, batch, j)[1]
        finally:
            unwrapped.enable_adapters()

    def _collate(self, samples: list[dict], idx: list[int], advantages: np.ndarray) -> dict:
        pick = [samples[i] for i in idx]
        device = self.accelerator.device
        return {
            "items": [s["item"] for s in pick],
            "size": pick[0]["size"],
            "latents": torch.stack([s["latents"] for s in pick]).to(device),
            "next_latents": torch.stack([s["next_latents"] for s in pick]).to(device),
            "log_probs": torch.stack([s["log_probs"] for s in pick]).to(device),
            "timesteps": torch.stack([s["timesteps"] for s in pick]).to(device),
            "sigmas": torch.stack([s["sigmas"] for s in pick]).to(device),
            "sigmas_next": torch.stack([s["sigmas_next"] for s in pick]).to(device),
            "sigma_max": pick[0]["sigma_max"],
            "advantages": torch.as_tensor(advantages[idx], dtype=torch.float32, device=device),
        }

    def _minibatches(self, samples: list[dict], epoch: int, inner: int) -> list[list[int]]:
        gen = torch.Generator().manual_seed(_seed(self.config.seed, epoch, self.rank, 2, inner))
        order = torch.randperm(len(samples), generator=gen).tolist()
        order.sort(key=lambda i: samples[i]["size"])  # stable: shuffled within each size
        batches, current = [], []
        for i in order:
            if current and (
                len(current) == self.config.train_batch_size
                or samples[current[0]]["size"] != samples[i]["size"]
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def train_epoch(self, samples: list[dict], advantages: np.ndarray, epoch: int) -> dict:
        """Clipped-PPO updates on the recorded noise steps; returns the epoch's training stats."""
        cfg = self.config
        model = self.model
        model.train()
        advantages = np.clip(advantages, -cfg.adv_clip_max, cfg.adv_clip_max)
        num_steps = samples[0]["latents"].shape[0] if samples else 0
        stats: dict[str, list[float]] = {
            k: [] for k in ("loss", "policy_loss", "kl", "ratio", "clip_fraction", "approx_kl")
        }
        first_update_ratios: list[torch.Tensor] = []
        optimizer_steps = 0
        batches = [
            b
            for inner in range(cfg.num_inner_epochs)
            for b in self._minibatches(samples, epoch, inner)
        ]
        accum = cfg.gradient_accumulation_steps
        for k, idx in enumerate(batches):
            batch = self._collate(samples, idx, advantages)
            step_now = (k + 1) % accum == 0 or k == len(batches) - 1
            group_len = min(accum, len(batches) - (k // accum) * accum)  # minibatches per step
            context = contextlib.nullcontext() if step_now else self.accelerator.no_sync(model)
            with context:
                for j in range(num_steps):
                    with self.accelerator.autocast():
                        log_prob, mean, std = self._transition(model, batch, j)
                        ref_mean = self._reference_mean(batch, j)
                    terms = grpo_loss(
                        log_prob,
                        batch["log_probs"][:, j],
                        batch["advantages"],
                        mean,
                        ref_mean,
                        std,
                        cfg.clip_range,
                        cfg.beta,
                    )
                    loss, ratio = terms["loss"], terms["ratio"]
                    self.accelerator.backward(loss / (num_steps * group_len))
                    if optimizer_steps == 0:
                        first_update_ratios.append(ratio.detach())
                    for key in stats:
                        stats[key].append(float(terms[key].detach().float().mean()))
            if step_now:
                if cfg.max_grad_norm > 0:
                    self.accelerator.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                if self.ema is not None:
                    self.ema.step(self.params)
                optimizer_steps += 1
        out = {f"train/{k}": float(np.mean(v)) if v else float("nan") for k, v in stats.items()}
        if first_update_ratios:
            r = torch.cat(first_update_ratios)
            out["train/ratio_first_update"] = float(r.mean())
            out["train/ratio_first_update_max_dev"] = float((r - 1).abs().max())
        out["train/optimizer_steps"] = optimizer_steps
        out["train/lr"] = float(self.lr_scheduler.get_last_lr()[0])
        return out

    # ================================================================== evaluation
    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict:
        """EMA weights, ODE sampling at ``test.resolution``; test rewards gathered without padding."""
        from torch.utils.data import DataLoader

        tc = self.config.test

        loader = self.accelerator.prepare(
            DataLoader(list(range(len(self.test_items))), batch_size=tc.batch_size, collate_fn=list)
        )
        unwrapped = self.accelerator.unwrap_model(self.model)
        unwrapped.eval()
        if self.ema is not None:
            self.ema.store(self.params)
            self.ema.copy_to(self.params)
        gathered: dict[str, list[torch.Tensor]] = {n: [] for n in self.test_rewards}
        try:
            for idx in loader:
                items = [self.test_items[i] for i in idx]
                generator = torch.Generator(self.accelerator.device).manual_seed(
                    _seed(tc.seed, idx[0])
                )
                by_size: dict[tuple[int, int], list[int]] = {}  # edits keep their aspect ratio
                for pos, item in enumerate(items):
                    by_size.setdefault(self._resolution(item, tc.resolution), []).append(pos)
                scores = {n: np.full(len(items), np.nan) for n in self.test_rewards}
                for size, positions in by_size.items():
                    part = [items[p] for p in positions]
                    with self.accelerator.autocast():
                        out = self._sample(part, size, tc, generator, unwrapped, noise=False)
                    for name, values in self.compute_rewards(
                        self.test_rewards, out.images, part
                    ).items():
                        scores[name][positions] = values
                    if self.accelerator.is_main_process and idx[0] == 0 and positions[0] == 0:
                        self._save_grid(
                            out.images, self.output_dir / "samples" / f"eval_epoch_{epoch:05d}.png"
                        )
                for name, values in scores.items():
                    t = torch.as_tensor(values, dtype=torch.float64, device=self.accelerator.device)
                    gathered[name].append(self.accelerator.gather_for_metrics(t).cpu())
        finally:
            if self.ema is not None:
                self.ema.restore(self.params)
        metrics = {"eval/resolution": tc.resolution}
        for name, chunks in gathered.items():
            values = torch.cat(chunks).numpy() if chunks else np.zeros(0)
            metrics[f"eval/reward/{name}/mean"] = (
                float(np.nanmean(values)) if values.size else float("nan")
            )
            metrics[f"eval/reward/{name}/std"] = (
                float(np.nanstd(values)) if values.size else float("nan")
            )
            metrics["eval/num_images"] = int(values.size)
        return metrics

    # ================================================================== main loop
    def run_epoch(self, epoch: int) -> dict:
        """Sample, reward, compute advantages and train for one epoch; returns its metrics
        (no evaluation, logging or checkpointing)."""
        cfg = self.config
        t0 = time.perf_counter()
        samples, rewards, group_ids, timings = self.sample_epoch(epoch)
        # gather rewards and prompt ids from all processes (equal sizes by construction)
        device = self.accelerator.device
        all_rewards = {
            n: self.accelerator.gather(torch.as_tensor(v, dtype=torch.float64, device=device))
            .cpu()
            .numpy()
            for n, v in rewards.items()
        }
        all_ids = self.accelerator.gather(torch.as_tensor(group_ids, device=device)).cpu().numpy()
        result = compute_advantages(
            all_rewards,
            {n: w for n, w in cfg.rewards.items()},
            [self.group_key(self.items[i]) for i in all_ids],
            aggregator=cfg.aggregator,
            threshold=cfg.log_taming_threshold,
            std_scope=cfg.std_scope,
            std_floor=cfg.std_floor,
            normalization=cfg.normalization,
        )
        n_local = len(samples)
        advantages = result.advantages[self.rank * n_local : (self.rank + 1) * n_local]
        t1 = time.perf_counter()
        train_stats = self.train_epoch(samples, advantages, epoch)
        t2 = time.perf_counter()
        metrics = {"epoch": epoch, "train/resolution": cfg.train.resolution}
        for name, values in all_rewards.items():
            metrics[f"reward/{name}/mean"] = float(np.nanmean(values))
            metrics[f"reward/{name}/std"] = float(np.nanstd(values))
        metrics.update(
            {
                "reward/aggregated/mean": float(np.nanmean(result.aggregated)),
                "advantages/mean": float(result.advantages.mean()),
                "advantages/std": float(result.advantages.std()),
                "advantages/abs_mean": float(np.abs(result.advantages).mean()),
                "group_std/mean": result.group_std_mean,
                "group_std/zero_fraction": result.zero_std_fraction,
                "reward/num_failed": result.num_failed,
                **{f"reward/{n}/log_tamed": int(v) for n, v in result.tamed.items()},
                **train_stats,
                **{f"reward/{n}/num_nan": int(np.isnan(v).sum()) for n, v in all_rewards.items()},
                "time/sampling": timings["sampling"],
                "time/reward": timings["reward_wait"],
                "time/reward_wait": timings["reward_wait"],
                "time/reward_compute": timings["reward_compute"],
                "time/training": t2 - t1,
            }
        )
        step = time.perf_counter() - t0
        metrics["time/step"] = step
        metrics["time/reward_share"] = timings["reward_wait"] / step if step > 0 else 0.0
        return metrics

    def train(self) -> list[dict]:
        """Run epochs ``start_epoch .. max_epochs - 1``; returns the metrics history."""
        from tqdm.auto import tqdm

        cfg = self.config
        if self.accelerator.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            cfg.save_json(self.output_dir / "config.json")
        progress = tqdm(
            range(self.start_epoch, cfg.max_epochs),
            initial=self.start_epoch,
            total=cfg.max_epochs,
            desc="GRPO epochs",
            disable=not self.accelerator.is_main_process,
        )
        for epoch in progress:
            t0 = time.perf_counter()
            metrics = self.run_epoch(epoch)
            last = epoch == cfg.max_epochs - 1
            if cfg.test.every and ((epoch + 1) % cfg.test.every == 0 or last):
                te = time.perf_counter()
                metrics.update(self.evaluate(epoch))
                metrics["time/eval"] = time.perf_counter() - te
            metrics["time/epoch"] = time.perf_counter() - t0
            self._log(metrics)
            if self.accelerator.is_main_process and self._epoch_images:
                self._save_grid(
                    self._epoch_images, self.output_dir / "samples" / f"train_epoch_{epoch:05d}.png"
                )
            if last or (cfg.save_every and (epoch + 1) % cfg.save_every == 0):
                self.save_checkpoint(epoch + 1)
            progress.set_postfix(
                {n: f"{metrics[f'reward/{n}/mean']:.3f}" for n in self.config.rewards}
            )
        self.accelerator.wait_for_everyone()
        if self._writer is not None:
            self._writer.flush()
        return self.history

    # ================================================================== logging
    def _log(self, metrics: dict) -> None:
        self.history.append(metrics)
        if not self.accelerator.is_main_process:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output_dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(metrics) + "\n")
        if self.config.tensorboard:
            if self._writer is None:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(str(self.output_dir / "tensorboard"))
            for key, value in metrics.items():
                if key != "epoch" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._writer.add_scalar(key, value, metrics["epoch"])
        plot_reward_curve(self.history, self.output_dir / "reward_curve.png")
        logger.info(
            "epoch %d: %s",
            metrics["epoch"],
            ", ".join(
                f"{k}={v:.4f}"
                for k, v in metrics.items()
                if k.startswith("reward/") and k.endswith("/mean")
            ),
        )

    @staticmethod
    def _save_grid(images, path: Path) -> None:
        from torchvision.utils import make_grid, save_image

        path.parent.mkdir(parents=True, exist_ok=True)
        images = [im.float().cpu() for im in images]
        height = max(im.shape[1] for im in images)  # sizes differ with per-item resolutions
        width = max(im.shape[2] for im in images)  # and with edits that keep aspect ratios
        images = [
            torch.nn.functional.pad(im, (0, width - im.shape[2], 0, height - im.shape[1]))
            for im in images
        ]
        buffer = io.BytesIO()
        save_image(make_grid(torch.stack(images), nrow=4, padding=2), buffer, format="png")
        atomic_write_bytes(path, buffer.getvalue())

    # ================================================================== checkpoints
    def _checkpoint_root(self) -> Path:
        return self.output_dir / "checkpoints"

    def _resolve_checkpoint(self, value: str) -> Path:
        if value != "latest":
            path = Path(value)
            if not (path / "trainer_state.pt").is_file():
                raise FileNotFoundError(
                    f"resume_from={value!r} is not a checkpoint folder (no trainer_state.pt)."
                )
            return path
        found = sorted(self._checkpoint_root().glob("checkpoint-*[0-9]"))
        if not found:
            raise FileNotFoundError(
                f"resume_from='latest' but {self._checkpoint_root()} holds no checkpoint; "
                "drop resume_from to start fresh."
            )
        return found[-1]

    def save_checkpoint(self, next_epoch: int) -> Path | None:
        """Write ``checkpoints/checkpoint-<next_epoch>`` atomically and prune old ones."""
        from peft.utils import get_peft_model_state_dict

        self.accelerator.wait_for_everyone()
        if not self.accelerator.is_main_process:
            return None
        root = self._checkpoint_root()
        final = root / f"checkpoint-{next_epoch:05d}"
        tmp = root / f".tmp-checkpoint-{next_epoch:05d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        unwrapped = self.accelerator.unwrap_model(self.model)
        type(self.pipe).save_lora_weights(  # the pipeline's own LoRA format
            tmp,
            transformer_lora_layers=get_peft_model_state_dict(unwrapped),
            weight_name=LORA_WEIGHT_NAME,
        )
        state = {
            "epoch": next_epoch,
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "rng": {
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
        }
        torch.save(state, tmp / "trainer_state.pt")
        self.config.save_json(tmp / "config.json")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in sorted(root.glob("checkpoint-*[0-9]"))[: -self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        logger.info("saved %s", final)
        return final

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore LoRA, optimizer, scheduler, EMA, epoch and RNG states from ``path``."""
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        path = Path(path)
        lora = load_file(str(path / LORA_WEIGHT_NAME))
        lora = {k.removeprefix("transformer."): v for k, v in lora.items()}
        unwrapped = self.accelerator.unwrap_model(self.model)
        result = set_peft_model_state_dict(unwrapped, lora)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(
                f"{path}: LoRA keys do not match this model: {result.unexpected_keys[:5]}"
            )
        state = torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        if self.ema is not None and state["ema"] is not None:
            self.ema.load_state_dict(state["ema"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        self.start_epoch = int(state["epoch"])
        metrics_file = self.output_dir / "metrics.jsonl"
        if metrics_file.is_file():
            rows = [
                json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()
            ]
            self.history = [r for r in rows if r["epoch"] < self.start_epoch]
            if self.accelerator.is_main_process:
                atomic_write_text(metrics_file, "".join(json.dumps(r) + "\n" for r in self.history))
        logger.info("resumed from %s at epoch %d", path, self.start_epoch)


def grpo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mean: torch.Tensor,
    ref_mean: torch.Tensor,
    std: torch.Tensor,
    clip_range: float,
    beta: float,
) -> dict[str, torch.Tensor]:
    """Clipped PPO objective on one SDE step plus ``beta`` x KL to the reference policy.

    ``ratio = exp(log_prob - old_log_prob)``; the policy loss is
    ``mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))``. Both policies are Gaussians
    with the same ``std``, so ``KL = |mean - ref_mean|^2 / (2 std^2)`` (averaged over elements,
    like the log-probability). Returns the loss and the per-sample terms for logging.

    Example:
        >>> z = torch.zeros(2)
        >>> out = grpo_loss(z, z, torch.tensor([1.0, -1.0]), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 1), 0.2, 0.0)
        >>> float(out["ratio"].mean()), float(out["policy_loss"])
        (1.0, 0.0)
    """
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    policy_loss = torch.maximum(unclipped, clipped).mean()
    dims = tuple(range(1, mean.ndim))
    kl = ((mean.float() - ref_mean.float()) ** 2).mean(dim=dims) / (
        2 * std.float().reshape(std.shape[0], -1)[:, 0] ** 2
    )
    return {
        "loss": policy_loss + beta * kl.mean(),
        "policy_loss": policy_loss,
        "kl": kl,
        "ratio": ratio,
        "clip_fraction": ((ratio - 1).abs() > clip_range).float(),
        "approx_kl": 0.5 * (log_prob - old_log_prob) ** 2,
    }


def plot_reward_curve(history: list[dict], path: str | Path) -> None:
    """Mean reward per epoch (train, and eval where present) as a PNG, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    keys = sorted(
        {
            k
            for row in history
            for k in row
            if k.endswith("/mean") and "reward/" in k and "aggregated" not in k
        }
    )
    for key in keys:
        points = [(row["epoch"], row[key]) for row in history if key in row]
        if points:
            xs, ys = zip(*points)
            ax.plot(
                xs,
                ys,
                marker="o" if key.startswith("eval/") else ".",
                label=key.removesuffix("/mean"),
            )
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean reward")
    ax.set_title("PaCo-GRPO reward curve")
    ax.grid(alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
