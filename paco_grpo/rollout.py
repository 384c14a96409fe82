"""Rollouts: sampling an epoch's image groups with the policy, scoring them, and turning the
recorded transitions back into training minibatches.

A :class:`Rollout` knows the policy's sampler, the prompt items and how each item is drawn
(its size, its GRPO group). :meth:`Rollout.sample_epoch` draws this process's share of an
epoch (SDE noise only at ``train.noise_steps``, recording the latents around those steps
and their log-probabilities) while the rewards of each batch are computed, on a background
event loop with ``async_rewards``. :meth:`Rollout.transition` re-scores a recorded step
under the current weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from paco_grpo.async_rewards import AsyncRewardRunner, compute_rewards
from paco_grpo.data import PromptItem, edit_references
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.rewards import Reward
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_reward.errors import InputError

__all__ = ["EpochRollout", "Rollout", "derive_seed", "reward_inputs"]


def derive_seed(*parts: int) -> int:
    """A deterministic 63-bit seed from integers (epoch, rank, ...)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, np.uint64)[0] >> 1)


def reward_inputs(images, items: list[PromptItem]) -> tuple[list, list[str], list[dict]]:
    """What a reward sees: float CHW CPU images in [0, 1], prompt texts, item metadata."""
    return (
        [img.detach().float().cpu() for img in images],
        [it.prompt for it in items],
        [it.metadata for it in items],
    )


@dataclass
class EpochRollout:
    """This process's samples of one epoch.

    Attributes:
        samples: one dict per image with its item index, its slot in the epoch (see
            :meth:`Rollout.epoch_slots`), size and recorded transitions.
        rewards: ``{reward name: (n,) scores}`` (NaN = failed item).
        group_ids: the item index of each sample.
        timings: ``sampling``, ``reward_wait`` and ``reward_compute`` seconds.
        images: the first ``num_sample_images`` images, for the sample grid.
        features: ``(n, d)`` L2-normalised image features when the rollout has a feature
            model (:class:`~paco_grpo.features.ImageFeatures`), else ``None``.
    """

    samples: list[dict]
    rewards: dict[str, np.ndarray]
    group_ids: list[int]
    timings: dict[str, float]
    images: list[torch.Tensor] = field(default_factory=list)
    features: np.ndarray | None = None


class Rollout:
    """Sampling and re-scoring with one policy pipeline.

    Args:
        config: the run's :class:`GRPOConfig`.
        sampler: the policy's :class:`~paco_grpo.pipelines.sampling.GRPOSampler`.
        items: the training prompt items.
        accelerator: the run's ``Accelerator`` (device, autocast, rank).
        editing: whether the policy edits a reference image per item.
    """

    def __init__(self, config: GRPOConfig, sampler, items, accelerator, editing: bool) -> None:
        self.config = config
        self.sampler = sampler
        self.items = items
        self.accelerator = accelerator
        self.editing = editing
        self.features = None  # an ImageFeatures: the diversity signal and advantage
        tc = config.train
        self.scheduler = FlowGRPOScheduler(tc.noise_level, tc.sde_type, tc.cps_log_prob)

    # ------------------------------------------------------------------ items
    def resolution(self, item: PromptItem, default: int) -> tuple[int, int]:
        """``(height, width)`` an item is drawn at."""
        if self.editing:  # an edit has its (resized) reference's size
            reference = item.metadata["source_image"]
            return reference.height, reference.width
        if self.config.item_resolution_overrides and item.height and item.width:
            return int(item.height), int(item.width)
        return default, default

    def group_key(self, item: PromptItem) -> str | tuple[str, str]:
        """GRPO group of an item's samples: the prompt id, and for editing ``(prompt id,
        image hash)`` (one instruction applied to different images is different groups)."""
        if self.editing:
            return (item.id, item.metadata["source_image_hash"])
        return item.id

    # ------------------------------------------------------------------ sampling
    def epoch_slots(self, epoch: int) -> list[int]:
        """The item index of each of the epoch's ``prompts_per_epoch x num_generations``
        images, in the order they are dealt to the processes: process ``r`` of ``N`` draws
        the ``r``-th contiguous ``1/N`` of the list, so a prompt's group may span two
        processes (its advantages come from the gathered group). The same on every process.
        """
        cfg = self.config
        rng = np.random.default_rng(derive_seed(cfg.seed, epoch))
        chosen = rng.choice(
            len(self.items),
            size=cfg.prompts_per_epoch,
            replace=cfg.prompts_per_epoch > len(self.items),
        )
        return [int(i) for i in chosen for _ in range(cfg.num_generations)]

    def sample(self, items: list[PromptItem], size, section, generator, transformer, noise: bool):
        """One sampling call for ``items`` at ``size``: the train step (``train.sde_type``) at
        the train noise steps when ``noise``, else ODE; editing policies get each item's
        reference image."""
        tc = self.config.train
        kwargs = {
            "num_steps": section.num_steps,
            "guidance_scale": section.guidance_scale,
            "noise_level": tc.noise_level if noise else 0.0,
            "noise_steps": tc.noise_steps if noise else [],
            "generator": generator,
            "transformer": transformer,
            "scheduler": self.scheduler if noise else None,
        }
        prompts = [it.prompt for it in items]
        if self.editing:
            references = [edit_references(it) for it in items]
            return self.sampler(prompts, references, area=None, **kwargs)
        return self.sampler(prompts, height=size[0], width=size[1], **kwargs)

    def sample_epoch(
        self,
        epoch: int,
        model,
        rewards: dict[str, Reward],
        num_images: int = 0,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> EpochRollout:
        """Sample this process's share of epoch ``epoch`` with ``model`` and score it.

        With ``async_rewards`` each batch's rewards are computed on a background event loop
        (:class:`~paco_grpo.async_rewards.AsyncRewardRunner`) while the next batch is
        sampled; only the time spent blocked on them counts as ``reward_wait``.
        ``progress(phase, done, total)`` is told of each sampled batch (``"sampling"``, in
        images) and of the wait for the rewards (``"rewards"``, in batches).
        """
        device = self.accelerator.device  # the reward threads make it their current device
        runner = AsyncRewardRunner(rewards, device=device) if self.config.async_rewards else None
        try:
            return self._sample_epoch(epoch, model, rewards, runner, num_images, progress)
        finally:
            if runner is not None:
                runner.close()

    def _sample_epoch(self, epoch, model, rewards, runner, num_images, progress) -> EpochRollout:
        cfg, tc = self.config, self.config.train
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        slots = self.epoch_slots(epoch)
        share = len(slots) // world  # EpochShape checked at start-up that it divides
        mine = list(range(rank * share, (rank + 1) * share))
        mine.sort(key=lambda s: self.resolution(self.items[slots[s]], tc.resolution))  # stable
        generator = torch.Generator(self.accelerator.device).manual_seed(
            derive_seed(cfg.seed, epoch, rank, 1)
        )
        samples, pending, images = [], [], []  # pending: a RewardBatch or its future per batch
        features: list[np.ndarray] = []
        timings = {"sampling": 0.0, "reward_wait": 0.0, "reward_compute": 0.0}
        model.eval()
        report = progress or (lambda phase, done, total: None)
        report("sampling", 0, len(mine))
        for start in range(0, len(mine), cfg.sample_batch_size):
            chunk = mine[start : start + cfg.sample_batch_size]
            sizes = {s: self.resolution(self.items[slots[s]], tc.resolution) for s in chunk}
            for size in sorted(set(sizes.values())):
                part = [s for s in chunk if sizes[s] == size]
                items = [self.items[slots[s]] for s in part]
                t0 = time.perf_counter()
                with self.accelerator.autocast():
                    out = self.sample(items, size, tc, generator, model, noise=True)
                t1 = time.perf_counter()
                inputs = reward_inputs(out.images, items)
                if runner is None:
                    pending.append(compute_rewards(rewards, *inputs))
                else:
                    pending.append(runner.submit(*inputs))
                    runner.raise_if_failed()  # a failed earlier batch stops the epoch now
                timings["sampling"] += t1 - t0
                timings["reward_wait"] += time.perf_counter() - t1
                images.extend(out.images[: max(0, num_images - len(images))])
                if self.features is not None:
                    features.append(self.features(out.images))
                schedule, steps = out.schedule, out.noise_steps
                for b, slot in enumerate(part):
                    samples.append(
                        {
                            "item": slots[slot],
                            "slot": slot,
                            "size": size,
                            "latents": out.noise_latents[b].detach(),
                            "next_latents": out.noise_next_latents[b].detach(),
                            "log_probs": out.log_probs[b].detach().float(),
                            "timesteps": schedule.timesteps[steps],
                            "sigmas": schedule.sigmas[steps],
                            "sigmas_next": schedule.sigmas[[s + 1 for s in steps]],
                            "sigma_max": schedule.sigma_max,
                        }
                    )
                report("sampling", len(samples), len(mine))
        report("rewards", 0, len(pending))
        t2 = time.perf_counter()
        batches = []
        for p in pending:
            batches.append(p if runner is None else p.result())  # re-raises
            report("rewards", len(batches), len(pending))
        timings["reward_wait"] += time.perf_counter() - t2
        timings["reward_compute"] = sum(b.seconds for b in batches)
        scores = {
            n: np.concatenate([b.scores[n] for b in batches]) if batches else np.zeros(0)
            for n in rewards
        }
        feats = np.concatenate(features) if self.features is not None and features else None
        return EpochRollout(samples, scores, [s["item"] for s in samples], timings, images, feats)

    # ------------------------------------------------------------------ training batches
    def minibatches(
        self, samples: list[dict], epoch: int, iteration: int, count: int | None = None
    ) -> list[list[int]]:
        """Shuffled minibatches of sample indices, each of one image size.

        ``count`` asks for at least that many minibatches (the largest minibatch is split
        until there are): every process must run the same number of synchronised backward
        passes, and editing samples of several sizes make more minibatches on one process
        than on another.
        """
        cfg = self.config
        rank = self.accelerator.process_index
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, epoch, rank, 2, iteration))
        order = torch.randperm(len(samples), generator=gen).tolist()
        order.sort(key=lambda i: samples[i]["size"])  # stable: shuffled within each size
        batches, current = [], []
        for i in order:
            if current and (
                len(current) == cfg.per_device_train_batch_size
                or samples[current[0]]["size"] != samples[i]["size"]
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        while count is not None and len(batches) < count:
            largest = max(range(len(batches)), key=lambda b: len(batches[b]))
            if len(batches[largest]) < 2:
                raise InputError(f"cannot split {len(samples)} samples into {count} minibatches.")
            half = len(batches[largest]) // 2
            batches[largest : largest + 1] = [batches[largest][:half], batches[largest][half:]]
        return batches

    def collate(self, samples: list[dict], idx: list[int], advantages: np.ndarray) -> dict:
        """The tensors of minibatch ``idx`` on the device, with their advantages."""
        pick = [samples[i] for i in idx]
        device = self.accelerator.device
        stacked = {
            key: torch.stack([s[key] for s in pick]).to(device)
            for key in (
                "latents",
                "next_latents",
                "log_probs",
                "timesteps",
                "sigmas",
                "sigmas_next",
            )
        }
        return {
            "items": [s["item"] for s in pick],
            "size": pick[0]["size"],
            "sigma_max": pick[0]["sigma_max"],
            "advantages": torch.as_tensor(advantages[idx], dtype=torch.float32, device=device),
            **stacked,
        }

    # ------------------------------------------------------------------ re-scoring
    def velocity(self, model, x, timesteps, items: list[PromptItem], size: tuple[int, int]):
        """The policy's velocity for recorded latents ``x`` of ``items`` (conditioning cached)."""
        references = [edit_references(it) for it in items] if self.editing else None
        prompts = [it.prompt for it in items]
        guidance = self.config.train.guidance_scale
        return self.sampler.transition_velocity(
            model, x, timesteps, prompts, size[0], size[1], guidance, references
        )

    def transition(self, model, batch: dict, j: int):
        """The scheduler step of recorded transition ``j`` under ``model`` (its
        ``log_prob``, ``prev_sample_mean`` and ``std``)."""
        x = batch["latents"][:, j]
        items = [self.items[i] for i in batch["items"]]
        v = self.velocity(model, x, batch["timesteps"][:, j], items, batch["size"])
        return self.scheduler.step(
            v,
            batch["sigmas"][:, j],
            batch["sigmas_next"][:, j],
            x,
            sigma_max=batch["sigma_max"],
            prev_sample=batch["next_latents"][:, j],
        )
