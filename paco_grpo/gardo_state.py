"""The run state of GARDO's options (:mod:`paco_grpo.gardo`): the gate's ``kappa`` and its
window, the reference adapter's reset rule and the reference adapter's weights. It is
saved in every checkpoint (``gardo_state.json``, ``reference_adapter.safetensors``) and
restored on resume, so a resumed run gates and resets exactly as the uninterrupted one.

Every process holds the same state: it changes only from gathered rewards and from step
KLs averaged over the processes.

    >>> state = GardoState(config, accelerator, model)  # doctest: +SKIP
    >>> state.maybe_reset(epoch)                         # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from paco_grpo.gardo import KappaController, ReferenceResetRule
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.policy import REFERENCE_ADAPTER, adapter_params, copy_adapter
from paco_reward.atomic_io import atomic_write_text
from paco_reward.errors import PathNotFoundError, WeightsMismatchError

__all__ = ["GARDO_STATE", "REFERENCE_WEIGHTS", "GardoState"]

GARDO_STATE = "gardo_state.json"
REFERENCE_WEIGHTS = "reference_adapter.safetensors"


class GardoState:
    """``kappa``, the reset rule and the reference adapter of one run.

    Args:
        config: the run's config (``kl_gate_kappa``, ``reference_reset_kl``,
            ``reference_reset_epochs``, ``kl_reference``).
        accelerator: the run's ``Accelerator``.
        model: the prepared transformer (with the reference adapter when
            ``kl_reference: adapter``).
    """

    def __init__(self, config: GRPOConfig, accelerator, model) -> None:
        self.accelerator = accelerator
        self.model = model
        self.adapter = config.kl_reference == "adapter"
        self.kappa = KappaController(start=config.kl_gate_kappa, kappa=config.kl_gate_kappa)
        self.rule = ReferenceResetRule(config.reference_reset_kl, config.reference_reset_epochs)

    def _reference(self) -> dict[str, torch.nn.Parameter]:
        return adapter_params(self.accelerator.unwrap_model(self.model), REFERENCE_ADAPTER)

    def maybe_reset(self, epoch: int) -> bool:
        """Reset the reference adapter to the policy before training ``epoch`` when the rule
        says so (:class:`~paco_grpo.gardo.ReferenceResetRule`); returns whether it did."""
        from paco_grpo.checkpointing import reshard

        if not self.adapter or not self.rule.should_reset(epoch):
            return False
        unwrapped = self.accelerator.unwrap_model(self.model)
        reshard(unwrapped)  # FSDP2: write the shards the next forward gathers
        copy_adapter(unwrapped)
        return True

    def observe_step(self, step_kl: float) -> None:
        """One optimizer step's KL on this process; averaged over processes first."""
        if not self.adapter:
            return
        value = torch.tensor([step_kl], dtype=torch.float64, device=self.accelerator.device)
        self.rule.observe(float(self.accelerator.reduce(value, reduction="mean")[0]))

    def state_dict(self) -> dict:
        return {"kappa": self.kappa.state_dict(), "reset": self.rule.state_dict()}

    # ------------------------------------------------------------------ checkpoints
    def save(self, output_dir) -> None:
        """Write the state (every process calls this: gathering FSDP2 shards is collective)."""
        from safetensors.torch import save_file

        from paco_grpo.checkpointing import _full

        weights = {n: _full(p.detach()) for n, p in self._reference().items()}
        if not self.accelerator.is_main_process:
            return
        os.makedirs(output_dir, exist_ok=True)
        if self.adapter:
            tensors = {n: t.contiguous().cpu() for n, t in weights.items()}
            save_file(tensors, os.path.join(output_dir, REFERENCE_WEIGHTS))
        text = json.dumps(self.state_dict(), indent=2)
        atomic_write_text(os.path.join(output_dir, GARDO_STATE), text)

    @torch.no_grad()
    def load(self, input_dir) -> None:
        """Restore the state saved by :meth:`save` (each process keeps its shard)."""
        from safetensors.torch import load_file

        from paco_grpo.checkpointing import _like

        path = Path(input_dir, GARDO_STATE)
        if not path.is_file():
            raise PathNotFoundError(
                f"{input_dir} has no {GARDO_STATE}: it was written by a run without GARDO's "
                "options; resume with the recipe that wrote it."
            )
        state = json.loads(path.read_text())
        self.kappa.load_state_dict(state["kappa"])
        self.rule.load_state_dict(state["reset"])
        if not self.adapter:
            return
        saved = load_file(os.path.join(input_dir, REFERENCE_WEIGHTS))
        reference = self._reference()
        if set(saved) != set(reference):
            raise WeightsMismatchError(
                f"{input_dir}: the reference adapter's keys do not match this model's; resume "
                "with the recipe that wrote the checkpoint.",
                source=str(input_dir),
                missing=sorted(set(reference) - set(saved)),
                unexpected=sorted(set(saved) - set(reference)),
            )
        for name, p in reference.items():
            p.copy_(_like(saved[name], p))
