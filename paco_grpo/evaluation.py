"""Evaluation of a GRPO policy: the EMA weights, ODE sampling at ``test.resolution``, the
test rewards, gathered over processes without the duplicates that padding an uneven last
batch would add.

When a test reward is a held-out judge of a training criterion (the same name, other
constructor arguments: :meth:`~paco_grpo.grpo_config.GRPOConfig.separate_test_rewards`),
the training judge scores the same evaluation images too, and the gap between the two
(``hacking/held_out_gap/<name>``, :func:`~paco_grpo.hacking_signals.held_out_gaps`) is
logged: a training judge that is being gamed drifts above the held-out one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from paco_grpo.async_rewards import compute_rewards
from paco_grpo.hacking_signals import held_out_gaps
from paco_grpo.rewards import Reward
from paco_grpo.rollout import Rollout, derive_seed, reward_inputs
from paco_grpo.tracking import sample_caption, save_image_grid

__all__ = ["TRAIN_JUDGE", "Evaluator"]

# the training judge's scores of the evaluation images: eval/reward/train_judge:<name>/mean
TRAIN_JUDGE = "train_judge:"


class Evaluator:
    """Scores the policy on the test prompts.

    Args:
        rollout: the run's :class:`~paco_grpo.rollout.Rollout` (sampler, sizes).
        test_items: the test prompt items.
        rewards: ``{name: reward}`` used at evaluation.
        samples_dir: where the first batch's images are saved as a grid (main process).
        train_judges: ``{name: training reward}`` for the test rewards that are held-out
            judges of a training criterion; they score the evaluation images too.
    """

    def __init__(
        self,
        rollout: Rollout,
        test_items,
        rewards: dict[str, Reward],
        samples_dir: Path,
        train_judges: dict[str, Reward] | None = None,
    ):
        self.train_judges = dict(train_judges or {})
        self.rollout = rollout
        self.test_items = test_items
        self.rewards = rewards
        self.samples_dir = samples_dir

    @torch.no_grad()
    def __call__(self, model, ema, params, epoch: int) -> dict:
        """Evaluate ``model`` with the EMA weights swapped in (restored afterwards) after the
        epoch of 0-based index ``epoch``."""
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
        judges = {**self.rewards, **{TRAIN_JUDGE + n: r for n, r in self.train_judges.items()}}
        gathered: dict[str, list[torch.Tensor]] = {n: [] for n in judges}
        try:
            for idx in loader:
                items = [self.test_items[i] for i in idx]
                generator = torch.Generator(accelerator.device).manual_seed(
                    derive_seed(tc.seed, idx[0])
                )
                by_size: dict[tuple[int, int], list[int]] = {}  # edits keep their aspect ratio
                for pos, item in enumerate(items):
                    by_size.setdefault(self.rollout.resolution(item, tc.resolution), []).append(pos)
                scores = {n: np.full(len(items), np.nan) for n in judges}
                for size, positions in by_size.items():
                    part = [items[p] for p in positions]
                    with accelerator.autocast():
                        out = self.rollout.sample(part, size, tc, generator, model, noise=False)
                    batch = compute_rewards(judges, *reward_inputs(out.images, part))
                    for name, values in batch.scores.items():
                        scores[name][positions] = values
                    if accelerator.is_main_process and idx[0] == 0 and positions[0] == 0:
                        captions = [
                            sample_caption(
                                it.prompt, {n: float(v[k]) for n, v in batch.scores.items()}
                            )
                            for k, it in enumerate(part)
                        ]
                        # numbered from 1 like the training grids and checkpoints
                        name = f"eval_epoch_{epoch + 1:05d}.png"
                        save_image_grid(out.images, self.samples_dir / name, captions)
                for name, values in scores.items():
                    t = torch.as_tensor(values, dtype=torch.float64, device=accelerator.device)
                    gathered[name].append(accelerator.gather_for_metrics(t).cpu())
        finally:
            if ema is not None:
                ema.restore(params)
        metrics = {"eval/resolution": tc.resolution}
        means = {}
        for name, chunks in gathered.items():
            values = torch.cat(chunks).numpy() if chunks else np.zeros(0)
            finite = values.size and not np.isnan(values).all()
            metrics[f"eval/reward/{name}/mean"] = float(np.nanmean(values)) if finite else np.nan
            metrics[f"eval/reward/{name}/std"] = float(np.nanstd(values)) if finite else np.nan
            means[name] = metrics[f"eval/reward/{name}/mean"]
            if not name.startswith(TRAIN_JUDGE):
                metrics["eval/num_images"] = int(values.size)
        trained = {n: means[TRAIN_JUDGE + n] for n in self.train_judges}
        metrics.update(held_out_gaps(trained, {n: means[n] for n in self.train_judges}))
        return metrics
