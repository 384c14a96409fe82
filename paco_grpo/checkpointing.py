"""Checkpoints of a GRPO run through ``accelerate``'s ``save_state`` / ``load_state``.

``save_state`` writes the optimizer, the scheduler and every process's RNG states; load
hooks registered on the ``Accelerator`` replace its full-model save by what a user wants
and can load: the LoRA adapter in the pipeline's own format (``pytorch_lora_weights.safetensors``,
loadable with ``FluxPipeline.load_lora_weights``), the EMA of the LoRA weights as
safetensors + JSON, and ``trainer_state.json`` (the next epoch). Nothing is unpickled on
load: accelerate reads its files with ``torch.load(weights_only=True)``, and the EMA is not
passed to ``register_for_checkpointing`` because accelerate loads custom objects with
``weights_only=False``.

A checkpoint is written to a temporary folder and renamed into
``output_dir/checkpoints/checkpoint-<next epoch>`` when every process has finished, then
the oldest beyond ``save_total_limit`` are deleted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from paco_reward.atomic_io import atomic_write_text

logger = logging.getLogger(__name__)

__all__ = ["CheckpointManager", "LORA_WEIGHT_NAME"]

LORA_WEIGHT_NAME = "pytorch_lora_weights.safetensors"
EMA_WEIGHTS = "ema_shadow_params.safetensors"
EMA_STATE = "ema_state.json"
TRAINER_STATE = "trainer_state.json"


class CheckpointManager:
    """Saves and restores a run's state.

    Args:
        accelerator: the run's ``Accelerator`` (the model, optimizer and scheduler prepared).
        pipeline_cls: the diffusers pipeline class, whose ``save_lora_weights`` writes the adapter.
        model: the prepared transformer with its LoRA adapter.
        ema: the ``diffusers.training_utils.EMAModel`` of the LoRA weights, or ``None``.
        root: ``output_dir/checkpoints``.
        save_total_limit: how many checkpoints to keep.
    """

    def __init__(self, accelerator, pipeline_cls, model, ema, root: Path, save_total_limit: int):
        self.accelerator = accelerator
        self.pipeline_cls = pipeline_cls
        self.model = model
        self.ema = ema
        self.root = root
        self.save_total_limit = save_total_limit
        accelerator.register_save_state_pre_hook(self._save_hook)
        accelerator.register_load_state_pre_hook(self._load_hook)

    # ------------------------------------------------------------------ accelerate hooks
    def _save_hook(self, models, weights, output_dir) -> None:
        from peft.utils import get_peft_model_state_dict

        weights.clear()  # the frozen base is not a checkpoint's business; LoRA is saved below
        if not self.accelerator.is_main_process:
            return
        unwrapped = self.accelerator.unwrap_model(self.model)
        self.pipeline_cls.save_lora_weights(  # the pipeline's own LoRA format
            output_dir,
            transformer_lora_layers=get_peft_model_state_dict(unwrapped),
            weight_name=LORA_WEIGHT_NAME,
        )
        if self.ema is not None:
            from safetensors.torch import save_file

            state = self.ema.state_dict()
            shadow = state.pop("shadow_params")
            save_file(
                {str(k): p.detach().contiguous().cpu() for k, p in enumerate(shadow)},
                os.path.join(output_dir, EMA_WEIGHTS),
            )
            atomic_write_text(os.path.join(output_dir, EMA_STATE), json.dumps(state, indent=2))

    def _load_hook(self, models, input_dir) -> None:
        from peft.utils import set_peft_model_state_dict
        from safetensors.torch import load_file

        models.clear()  # accelerate must not look for a full-model file
        lora = load_file(os.path.join(input_dir, LORA_WEIGHT_NAME))
        lora = {k.removeprefix("transformer."): v for k, v in lora.items()}
        result = set_peft_model_state_dict(self.accelerator.unwrap_model(self.model), lora)
        if getattr(result, "unexpected_keys", None):
            raise ValueError(
                f"{input_dir}: LoRA keys do not match this model: {result.unexpected_keys[:5]}"
            )
        if self.ema is not None:
            shadow = load_file(os.path.join(input_dir, EMA_WEIGHTS))
            state = json.loads(Path(input_dir, EMA_STATE).read_text())
            state["shadow_params"] = [shadow[str(k)] for k in range(len(shadow))]
            self.ema.load_state_dict(state)

    # ------------------------------------------------------------------ save / load
    def save(self, next_epoch: int) -> Path:
        """Write ``checkpoint-<next_epoch>`` (all processes call this) and prune old ones."""
        final = self.root / f"checkpoint-{next_epoch:05d}"
        tmp = self.root / f".tmp-checkpoint-{next_epoch:05d}"
        if self.accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(str(tmp))
        if self.accelerator.is_main_process:
            atomic_write_text(tmp / TRAINER_STATE, json.dumps({"epoch": next_epoch}) + "\n")
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            for old in sorted(self.root.glob("checkpoint-*[0-9]"))[: -self.save_total_limit]:
                shutil.rmtree(old, ignore_errors=True)
            logger.info("saved %s", final)
        self.accelerator.wait_for_everyone()
        return final

    def load(self, path: str | Path) -> int:
        """Restore every state from ``path``; returns the epoch to continue with."""
        path = Path(path)
        self.accelerator.load_state(str(path))
        return int(json.loads((path / TRAINER_STATE).read_text())["epoch"])

    def resolve(self, value: str) -> Path:
        """A checkpoint folder from ``resume_from_checkpoint`` (a path or ``"latest"``)."""
        if value != "latest":
            path = Path(value)
            if not (path / TRAINER_STATE).is_file():
                raise FileNotFoundError(
                    f"resume_from_checkpoint={value!r} is not a checkpoint folder (no {TRAINER_STATE})."
                )
            return path
        found = sorted(self.root.glob("checkpoint-*[0-9]"))
        if not found:
            raise FileNotFoundError(
                f"resume_from_checkpoint='latest' but {self.root} holds no checkpoint; "
                "drop resume_from_checkpoint to start fresh."
            )
        return found[-1]
