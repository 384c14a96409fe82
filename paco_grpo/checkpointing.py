"""Checkpoints of a GRPO run through ``accelerate``'s ``save_state`` / ``load_state``.

``save_state`` writes the optimizer, the scheduler and every process's RNG states; load
hooks registered on the ``Accelerator`` replace its full-model save by what a user wants
and can load: the LoRA adapter in the pipeline's own format (``pytorch_lora_weights.safetensors``,
loadable with the diffusers pipeline's ``load_lora_weights``), the EMA of the LoRA weights as
safetensors + JSON, and ``trainer_state.json`` (the next epoch). Nothing is unpickled on
load: accelerate reads its files with ``torch.load(weights_only=True)``, and the EMA is not
passed to ``register_for_checkpointing`` because accelerate loads custom objects with
``weights_only=False``.

A checkpoint is written to a temporary folder and renamed into
``output_dir/checkpoints/checkpoint-<next epoch>`` when every process has finished, then
the oldest of this run's beyond ``save_total_limit`` are deleted: each checkpoint's
``trainer_state.json`` names the run that wrote it (``run_id``, kept across resumes) and when
(``saved_at``), so rotation never deletes the checkpoint just written nor another run's (whose
numbers may sort higher), and ``latest`` is the checkpoint saved last, whatever its number. This is not accelerate's own rotation
(``ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=...)``) on purpose: that
deletes the oldest checkpoint *before* writing the new one in place, so a run killed while
saving is left with one complete checkpoint fewer and a partial newest one, which its
``load_state()`` then picks; and it rotates only what ``save_state`` writes, not the FSDP path
below.

Under FSDP (``fsdp_version: 2``, ``recipes/accelerate/fsdp_grpo.yaml``) the LoRA parameters and
their EMA are DTensor shards: every process gathers them (``full_tensor``), rank 0 writes the
same files as above, and loading gives each process its shard of the full tensors again, so a
checkpoint is the same whatever the number of processes or the sharding. ``save_state`` is not
used there, because accelerate's FSDP branch always writes (and reads back) the full model,
frozen base included (24 GB for FLUX.1-dev); the optimizer goes through accelerate's
``save_fsdp_optimizer`` / ``load_fsdp_optimizer`` and the scheduler and RNG states through
``save_accelerator_state`` / ``load_accelerator_state``, the same files ``save_state`` writes.
FSDP1 is refused: its flat parameters are not what the EMA, the sampler or this module can use.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

import torch

from paco_reward.atomic_io import atomic_write_text
from paco_reward.errors import ConfigError, InputError, PathNotFoundError, WeightsMismatchError

logger = logging.getLogger(__name__)

__all__ = ["CheckpointManager", "LORA_WEIGHT_NAME", "check_grpo_output_dir", "reshard"]

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
        extra: more run state with ``save(dir)`` (called on every process) and ``load(dir)``
            (:class:`~paco_grpo.gardo_state.GardoState`), or ``None``.
        root: ``output_dir/checkpoints``.
        save_total_limit: how many checkpoints to keep.
    """

    def __init__(
        self,
        accelerator,
        pipeline_cls,
        model,
        ema,
        root: Path,
        save_total_limit: int,
        extra=None,
    ):
        self.accelerator = accelerator
        self.pipeline_cls = pipeline_cls
        self.model = model
        self.ema = ema
        self.extra = extra  # saved and loaded beside the LoRA (save(dir) / load(dir)): GARDO's
        self.root = root
        self.save_total_limit = save_total_limit
        # Which checkpoints are this run's: a fresh id, or the resumed checkpoint's (load).
        self.run_id = uuid.uuid4().hex
        self._own_ids: set[str | None] = {self.run_id}
        from accelerate.utils import DistributedType

        self.fsdp = accelerator.distributed_type == DistributedType.FSDP
        if self.fsdp and not accelerator.is_fsdp2:
            raise ConfigError(
                "GRPO under FSDP needs fsdp_version: 2 (recipes/accelerate/fsdp_grpo.yaml)."
            )
        accelerator.register_save_state_pre_hook(self._save_hook)
        accelerator.register_load_state_pre_hook(self._load_hook)

    # ------------------------------------------------------------------ LoRA and EMA files
    def _lora_params(self) -> list[tuple[str, torch.Tensor]]:
        """(name, parameter) of the trainable (LoRA) parameters: the live ones, DTensor
        shards under FSDP2, in the order the EMA shadows them."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        return [(n, p) for n, p in unwrapped.named_parameters() if p.requires_grad]

    def _peft_keys(self) -> list[str]:
        """The adapter-file key (``get_peft_model_state_dict``'s) of each of :meth:`_lora_params`."""
        from peft.utils import get_peft_model_state_dict

        names = {n: torch.tensor(i) for i, (n, _) in enumerate(self._lora_params())}
        keys = get_peft_model_state_dict(
            self.accelerator.unwrap_model(self.model), state_dict=names
        )
        by_index = {int(v): k for k, v in keys.items()}
        if sorted(by_index) != list(range(len(names))):
            outside = sorted(n for i, n in enumerate(names) if i not in by_index)
            raise InputError(
                f"trainable parameters outside the LoRA adapter: {outside[:5]}; GRPO trains and "
                "checkpoints the adapter only: freeze the other parameters."
            )
        return [by_index[i] for i in range(len(names))]

    def _write_lora_and_ema(self, output_dir) -> None:
        """Gather the LoRA weights and the EMA (collective under FSDP: every process calls
        this) and write them on the main process."""
        lora = [_full(p.detach()) for _, p in self._lora_params()]
        shadow = [_full(p) for p in self.ema.shadow_params] if self.ema is not None else None
        if self.extra is not None:
            self.extra.save(output_dir)  # collective under FSDP: before the main-only return
        if not self.accelerator.is_main_process:
            return
        self.pipeline_cls.save_lora_weights(  # the pipeline's own LoRA format
            output_dir,
            transformer_lora_layers=dict(zip(self._peft_keys(), lora)),
            weight_name=LORA_WEIGHT_NAME,
        )
        if self.ema is not None:
            from safetensors.torch import save_file

            state = self.ema.state_dict()
            state.pop("shadow_params")
            save_file(
                {str(k): p.detach().contiguous().cpu() for k, p in enumerate(shadow)},
                os.path.join(output_dir, EMA_WEIGHTS),
            )
            atomic_write_text(os.path.join(output_dir, EMA_STATE), json.dumps(state, indent=2))

    @torch.no_grad()
    def _read_lora_and_ema(self, input_dir) -> None:
        """Load the LoRA weights and the EMA on every process (each keeps its shard)."""
        from safetensors.torch import load_file

        lora = load_file(os.path.join(input_dir, LORA_WEIGHT_NAME))
        lora = {k.removeprefix("transformer."): v for k, v in lora.items()}
        params = self._lora_params()
        keys = self._peft_keys()
        if set(lora) != set(keys):
            unexpected, missing = sorted(set(lora) - set(keys)), sorted(set(keys) - set(lora))
            raise WeightsMismatchError(
                f"{input_dir}: LoRA keys do not match this model: unexpected {unexpected[:5]}, "
                f"missing {missing[:5]}. Resume with the recipe that wrote the checkpoint (its "
                "pipeline, lora_r and lora_target_modules).",
                source=str(input_dir),
                missing=missing,
                unexpected=unexpected,
            )
        for key, (_, p) in zip(keys, params):
            p.copy_(_like(lora[key], p))
        if self.extra is not None:
            self.extra.load(input_dir)
        if self.ema is not None:
            shadow = load_file(os.path.join(input_dir, EMA_WEIGHTS))
            if len(shadow) != len(self.ema.shadow_params):
                raise WeightsMismatchError(
                    f"{input_dir}: the EMA has {len(shadow)} tensors, not {len(params)} (LoRA); "
                    "resume with the recipe that wrote the checkpoint.",
                    source=str(input_dir),
                )
            state = json.loads(Path(input_dir, EMA_STATE).read_text())
            state["shadow_params"] = [
                _like(shadow[str(k)], ref) for k, ref in enumerate(self.ema.shadow_params)
            ]
            self.ema.load_state_dict(state)

    # ------------------------------------------------------------------ accelerate hooks
    def _save_hook(self, models, weights, output_dir) -> None:
        weights.clear()  # the frozen base is not a checkpoint's business; LoRA is saved below
        self._write_lora_and_ema(output_dir)

    def _load_hook(self, models, input_dir) -> None:
        models.clear()  # accelerate must not look for a full-model file
        self._read_lora_and_ema(input_dir)

    # ------------------------------------------------------------------ FSDP (no save_state)
    def _save_fsdp(self, output_dir: Path) -> None:
        from accelerate.checkpointing import save_accelerator_state
        from accelerate.utils import save_fsdp_optimizer

        acc = self.accelerator
        os.makedirs(output_dir, exist_ok=True)
        reshard(self.model)  # the optimizer knows the sharded parameters, not gathered ones
        self._write_lora_and_ema(output_dir)
        plugin = self._fsdp_plugin()
        for i, optimizer in enumerate(acc._optimizers):
            save_fsdp_optimizer(plugin, acc, optimizer, self.model, str(output_dir), i)
        save_accelerator_state(
            str(output_dir), [], [], acc._schedulers, acc._dataloaders,
            acc.process_index, acc.step, acc.scaler,
            save_on_each_node=acc.project_configuration.save_on_each_node,
        )  # fmt: skip

    def _load_fsdp(self, input_dir: Path) -> None:
        from accelerate.checkpointing import load_accelerator_state
        from accelerate.utils import load_fsdp_optimizer

        acc = self.accelerator
        reshard(self.model)  # write into the sharded parameters, the next forward gathers them
        self._read_lora_and_ema(input_dir)
        plugin = self._fsdp_plugin()
        for i, optimizer in enumerate(acc._optimizers):
            load_fsdp_optimizer(plugin, acc, optimizer, self.model, str(input_dir), i)
        override = load_accelerator_state(
            str(input_dir), [], [], acc._schedulers, acc._dataloaders, acc.process_index,
            acc.scaler, "cpu",
        )  # fmt: skip
        acc.step = override.get("step", acc.step)

    def _fsdp_plugin(self):
        plugin = self.accelerator.state.fsdp_plugin
        from torch.distributed.fsdp import StateDictType

        if plugin.state_dict_type == StateDictType.FULL_STATE_DICT:  # as save_fsdp_model sets it
            multi = self.accelerator.num_processes > 1
            plugin.state_dict_config.offload_to_cpu = plugin.state_dict_config.rank0_only = multi
        return plugin

    # ------------------------------------------------------------------ save / load
    def save(self, next_epoch: int) -> Path:
        """Write ``checkpoint-<next_epoch>`` (all processes call this) and prune old ones."""
        final = self.root / f"checkpoint-{next_epoch:05d}"
        tmp = self.root / f".tmp-checkpoint-{next_epoch:05d}"
        if self.accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        if self.fsdp:
            self._save_fsdp(tmp)
        else:
            self.accelerator.save_state(str(tmp))
        if self.accelerator.is_main_process:
            state = {"epoch": next_epoch, "run_id": self.run_id, "saved_at": time.time()}
            atomic_write_text(tmp / TRAINER_STATE, json.dumps(state) + "\n")
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            self._rotate(final)
            logger.info("saved %s", final)
        self.accelerator.wait_for_everyone()
        return final

    def load(self, path: str | Path) -> int:
        """Restore every state from ``path``; returns the epoch to continue with."""
        path = Path(path)
        if self.fsdp:
            self._load_fsdp(path)
        else:
            self.accelerator.load_state(str(path))
        state = json.loads((path / TRAINER_STATE).read_text())
        # A resumed run is the run that wrote the checkpoint: its rotation counts that
        # run's checkpoints (one written before run ids has none: those then count).
        self.run_id = state.get("run_id") or self.run_id
        self._own_ids = {self.run_id, state.get("run_id")}
        return int(state["epoch"])

    def resolve(self, value: str) -> Path:
        """A checkpoint folder from ``resume_from_checkpoint`` (a path or ``"latest"``)."""
        if value != "latest":
            path = Path(value)
            if not (path / TRAINER_STATE).is_file():
                raise PathNotFoundError(
                    f"resume_from_checkpoint={value!r} is not a checkpoint folder (no {TRAINER_STATE})."
                )
            return path
        latest = self.latest()
        if latest is None:
            raise PathNotFoundError(
                f"resume_from_checkpoint='latest' but {self.root} holds no checkpoint; "
                "drop resume_from_checkpoint to start fresh."
            )
        return latest

    def latest(self) -> Path | None:
        """The complete checkpoint saved last (by ``saved_at``, then number), or ``None``
        before the first: the last run's newest state, not a higher-numbered folder of
        another run or of a branch a resume left behind."""
        found = sorted(self.root.glob("checkpoint-*[0-9]"), key=_saved_order)
        return found[-1] if found else None

    def _rotate(self, final: Path) -> None:
        """Delete this run's oldest checkpoints beyond ``save_total_limit``; never ``final``
        (just written) nor another run's."""
        own = [
            p
            for p in self.root.glob("checkpoint-*[0-9]")
            if p != final and _read_state(p).get("run_id") in self._own_ids
        ]
        keep = max(self.save_total_limit - 1, 0)
        for old in sorted(own, key=_saved_order)[: len(own) - keep]:
            shutil.rmtree(old, ignore_errors=True)


def _read_state(path: Path) -> dict:
    """A checkpoint's ``trainer_state.json`` (empty if it cannot be read)."""
    try:
        return json.loads((path / TRAINER_STATE).read_text())
    except (OSError, ValueError):
        return {}


def _saved_order(path: Path) -> tuple[float, str]:
    """Sort key: when the checkpoint was saved (0 for one written before ``saved_at``), then
    its name (the zero-padded epoch)."""
    return float(_read_state(path).get("saved_at", 0.0)), path.name


def check_grpo_output_dir(config, is_main_process: bool = True) -> str:
    """Refuse an ``output_dir`` that holds another run's checkpoints or metrics
    (:func:`paco_reward.output_dirs.check_config_output_dir`); with ``overwrite_output_dir``
    the main process deletes them. Returns how the folder is used (``"new"``, ``"resume"``, ...)."""
    from paco_grpo.tracking import TRACKER_PROJECT
    from paco_reward.output_dirs import check_config_output_dir

    return check_config_output_dir(
        config,
        markers=["checkpoints/checkpoint-*", "metrics.jsonl"],
        outputs=["checkpoints", "metrics.jsonl", "reward_curve.png", "samples", TRACKER_PROJECT],
        what="GRPO run",
        is_main_process=is_main_process,
    )


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of an FSDP2 (DTensor) shard (collective), or ``t`` itself."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _like(full: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``full`` as ``ref`` holds it: this process's shard of it when ``ref`` is a DTensor
    (every process has ``full``, so nothing is sent), on ``ref``'s device and dtype."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(ref, DTensor):
        full = full.to(ref.to_local().device, ref.dtype)
        return distribute_tensor(full, ref.device_mesh, ref.placements, src_data_rank=None)
    return full.to(ref.device, ref.dtype)


def reshard(model) -> None:
    """Put every FSDP2 unit of ``model`` back in its sharded state (nothing else: a no-op).

    FSDP2 registers a unit's gathered parameters in place of its shards while it is unsharded,
    and the root unit stays so after a forward without backward (sampling, evaluation): the
    module's parameters are then not the optimizer's, and values written into the shards (the
    EMA swapped in for evaluation and back, a checkpoint loaded) are not seen by the next
    forward. Call it before and after such reads and writes."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
