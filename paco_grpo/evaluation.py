"""Evaluation of a GRPO policy: the EMA weights, ODE sampling at ``test.resolution``, the
test rewards, gathered over processes without the duplicates that padding an uneven last
batch would add."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paco_grpo.async_rewards import compute_rewards
from paco_grpo.rewards import Reward
from paco_grpo.rollout import Rollout, derive_seed, reward_inputs
from paco_grpo.tracking import save_image_grid

__all__ = ["Evaluator"]


class Evaluator:
    """Scores the policy on the test prompts.

    Args:
        rollout: the run's :class:`~paco_grpo.rollout.Rollout` (sampler, sizes).
        test_items: the test prompt items.
        rewards: ``{name: reward}`` used at evaluation.
        samples_dir: where the first batch's images are saved as a grid (main process).
    """

    def __init__(self, rollout: Rollout, test_items, rewards: dict[str, Reward], samples_dir: Path):
        self.rollout = rollout
        self.test_items = test_items
        self.rewards = rewards
        self.samples_dir = samples_dir

    @torch.no_grad()
    def __call__(self, model, ema, params, epoch: int) -> dict:
        """Evaluate ``model`` with the EMA weights swapped in (restored afterwards)."""
        from torch.utils.data import DataLoader

        accelerator = self.rollout.accelerator
        config = self.rollout.config
        tc = config.test
        loader = accelerator.prepare(
            DataLoader(
                list(range(len(self.test_items))),
                batch_size=config.per_device_eval_batch_size,
                collate_fn=list,
            )
        )
        model.eval()
        if ema is not None:
            ema.store(params)
            ema.copy_to(params)
        gathered: dict[str, list[torch.Tensor]] = {n: [] for n in self.rewards}
        try:
            for idx in loader:
                items = [self.test_items[i] for i in idx]
                generator = torch.Generator(accelerator.device).manual_seed(
                    derive_seed(tc.seed, idx[0])
                )
                by_size: dict[tuple[int, int], list[int]] = {}  # edits keep their aspect ratio
                for pos, item in enumerate(items):
                    by_size.setdefault(self.rollout.resolution(item, tc.resolution), []).append(pos)
                scores = {n: np.full(len(items), np.nan) for n in self.rewards}
                for size, positions in by_size.items():
                    part = [items[p] for p in positions]
                    with accelerator.autocast():
                        out = self.rollout.sample(part, size, tc, generator, model, noise=False)
                    batch = compute_rewards(self.rewards, *reward_inputs(out.images, part))
                    for name, values in batch.scores.items():
                        scores[name][positions] = values
                    if accelerator.is_main_process and idx[0] == 0 and positions[0] == 0:
                        save_image_grid(
                            out.images, self.samples_dir / f"eval_epoch_{epoch:05d}.png"
                        )
                for name, values in scores.items():
                    t = torch.as_tensor(values, dtype=torch.float64, device=accelerator.device)
                    gathered[name].append(accelerator.gather_for_metrics(t).cpu())
        finally:
            if ema is not None:
                ema.restore(params)
        metrics = {"eval/resolution": tc.resolution}
        for name, chunks in gathered.items():
            values = torch.cat(chunks).numpy() if chunks else np.zeros(0)
            finite = values.size and not np.isnan(values).all()
            metrics[f"eval/reward/{name}/mean"] = float(np.nanmean(values)) if finite else np.nan
            metrics[f"eval/reward/{name}/std"] = float(np.nanstd(values)) if finite else np.nan
            metrics["eval/num_images"] = int(values.size)
        return metrics
