"""One PaCo-GRPO optimizer step: the clipped-PPO updates of an accumulation window.

:class:`GRPOStep` is the trainer's inner step and nothing else: for each minibatch of the
window, each recorded noise step is re-scored under the current weights
(:meth:`~paco_grpo.rollout.Rollout.transition`), the frozen base's step mean is computed
when the KL is needed, :func:`~paco_grpo.grpo_loss.grpo_loss` is taken and backpropagated;
then the gradients are synchronised once, clipped, and the optimizer, the learning-rate
schedule and the EMA step once. :class:`~paco_grpo.grpo_trainer.GRPOTrainer` calls it for
every window of an epoch, and ``benchmarks/gpu_check.py`` times the same object on the real
shapes, so a measured step is the trained step.

Gradient synchronisation: under data parallelism the LoRA gradients are averaged by hand
after the window (one all-reduce), because DDP's own sync breaks when a step calls the model
twice before its backward (true CFG: conditional and unconditional passes); FSDP syncs at
the window's last backward.

    >>> step = GRPOStep(config, accelerator, model, optimizer, rollout, params)  # doctest: +SKIP
    >>> out = step(samples, [[0, 1, 2, 3]], advantages)                          # doctest: +SKIP
    >>> out.stats["loss"], out.lr                                                # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_loss import grpo_loss
from paco_grpo.policy import POLICY_ADAPTER, REFERENCE_ADAPTER
from paco_grpo.rollout import Rollout

__all__ = ["TRAIN_STATS", "GRPOStep", "GRPOStepOutput"]

# grpo_loss's per-sample terms logged per step (and "kl" when the KL is computed)
TRAIN_STATS = ("loss", "policy_loss", "ratio", "clip_fraction", "approx_kl")


@dataclass
class GRPOStepOutput:
    """What one optimizer step did.

    Attributes:
        stats: ``{name: [mean of each (minibatch, noise step)]}`` of :data:`TRAIN_STATS`
            (and ``kl``).
        ratios: the importance ratios of every sample and noise step, detached (the trainer
            checks the first step of an epoch is on-policy).
        lr: the learning rate the step used.
        grad_norm: the gradients' norm before clipping (NaN with ``max_grad_norm: 0``).
    """

    stats: dict[str, list[float]] = field(default_factory=dict)
    ratios: list[torch.Tensor] = field(default_factory=list)
    lr: float = math.nan
    grad_norm: float = math.nan


class GRPOStep:
    """The clipped-PPO update of one accumulation window, then one optimizer step.

    Args:
        config: the run's :class:`GRPOConfig` (``epsilon``, ``beta``, ``log_kl``,
            ``max_grad_norm``).
        accelerator: the run's ``Accelerator``.
        model: the prepared (wrapped) transformer with its LoRA.
        optimizer: the prepared optimizer.
        rollout: the :class:`~paco_grpo.rollout.Rollout` that recorded the samples.
        params: the trainable parameters (after ``prepare``: FSDP2 replaces them).
        lr_scheduler: the prepared schedule, stepped once per optimizer step (optional).
        ema: an EMA of ``params`` (diffusers' ``EMAModel``), stepped once per optimizer step.
        sharded: whether ``model`` is FSDP-sharded (it then synchronises its gradients).
    """

    def __init__(
        self,
        config: GRPOConfig,
        accelerator,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        rollout: Rollout,
        params: list[torch.nn.Parameter],
        *,
        lr_scheduler=None,
        ema=None,
        sharded: bool = False,
    ) -> None:
        self.config = config
        self.accelerator = accelerator
        self.model = model
        self.optimizer = optimizer
        self.rollout = rollout
        self.params = params
        self.lr_scheduler = lr_scheduler
        self.ema = ema
        self.by_hand = accelerator.num_processes > 1 and not sharded

    @property
    def stat_keys(self) -> tuple[str, ...]:
        """The names of the stats a step reports: :data:`TRAIN_STATS`, ``kl`` with a KL
        term and ``kl_gated`` with GARDO's gate (``kl_gate_rewards``)."""
        gated = ("kl_gated",) if self.with_kl and self.config.kl_gate_rewards else ()
        return TRAIN_STATS + (("kl",) if self.with_kl else ()) + gated

    @property
    def with_kl(self) -> bool:
        """Whether the frozen base runs: ``beta > 0`` or ``log_kl``."""
        return self.config.beta > 0 or self.config.log_kl

    def __call__(
        self,
        samples: list[dict],
        window: list[list[int]],
        advantages: np.ndarray,
        kl_gate: np.ndarray | None = None,
    ) -> GRPOStepOutput:
        """Backpropagate the window's minibatches (``window``: lists of indices into
        ``samples``; ``advantages``: one per sample, already clipped; ``kl_gate``: which
        samples get the KL term, GARDO's gate, ``None`` = all), then step."""
        cfg = self.config
        model = self.model
        model.train()  # gradient checkpointing runs in training mode only
        num_steps = samples[window[0][0]]["latents"].shape[0]
        out = GRPOStepOutput(stats={k: [] for k in self.stat_keys})
        for k, idx in enumerate(window):
            batch = self.rollout.collate(samples, idx, advantages)
            gate = None
            if kl_gate is not None and self.with_kl:
                gate = torch.as_tensor(
                    kl_gate[idx], dtype=torch.bool, device=batch["advantages"].device
                )
            for j in range(num_steps):
                last = not self.by_hand and k == len(window) - 1 and j == num_steps - 1
                sync = contextlib.nullcontext() if last else self.accelerator.no_sync(model)
                with sync:
                    with self.accelerator.autocast():
                        step = self.rollout.transition(model, batch, j)
                        ref_mean = self.reference_mean(batch, j) if self.with_kl else None
                    terms = grpo_loss(
                        step.log_prob,
                        batch["log_probs"][:, j],
                        batch["advantages"],
                        step.prev_sample_mean,
                        ref_mean,
                        step.std,
                        cfg.epsilon,
                        cfg.beta,
                        gate,
                    )
                    self.accelerator.backward(terms["loss"] / (num_steps * len(window)))
                out.ratios.append(terms["ratio"].detach())
                for key in out.stats:
                    out.stats[key].append(float(terms[key].detach().float().mean()))
        if self.by_hand:
            self.average_gradients()
        out.lr, out.grad_norm = self.optimizer_step()
        return out

    @torch.no_grad()
    def reference_mean(self, batch: dict, j: int) -> torch.Tensor:
        """The reference policy's step mean for the KL term: the frozen base (LoRA disabled)
        or, with ``kl_reference: adapter``, GARDO's reference adapter."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        if self.config.kl_reference == "adapter":
            unwrapped.set_adapter(REFERENCE_ADAPTER)
            try:
                return self.rollout.transition(unwrapped, batch, j).prev_sample_mean
            finally:
                unwrapped.set_adapter(POLICY_ADAPTER)  # trainable again (set_adapter's rule)
        unwrapped.disable_adapters()
        try:
            return self.rollout.transition(unwrapped, batch, j).prev_sample_mean
        finally:
            unwrapped.enable_adapters()

    def average_gradients(self) -> None:
        """Average the LoRA gradients over the processes (one all-reduce per window)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = self.accelerator.reduce(torch.cat([g.flatten() for g in grads]), reduction="mean")
        for p, g in zip(self.params, flat.split([g.numel() for g in grads])):
            p.grad = g.view_as(p).to(p.dtype)

    def optimizer_step(self) -> tuple[float, float]:
        """Clip, step the optimizer, the schedule and the EMA; returns the step's learning
        rate and the gradients' norm before clipping."""
        cfg = self.config
        grad_norm = math.nan
        if cfg.max_grad_norm > 0:
            grad_norm = float(self.accelerator.clip_grad_norm_(self.params, cfg.max_grad_norm))
        if self.lr_scheduler is not None:
            lr = float(self.lr_scheduler.get_last_lr()[0])
        else:
            lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.step(self.params)
        return lr, grad_norm
