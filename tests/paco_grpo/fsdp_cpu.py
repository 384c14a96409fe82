"""``paco-grpo`` under ``accelerate launch`` with FSDP2 on CPU processes (gloo), recording
what each rank ran with (a helper of ``test_grpo_fsdp.py``)::

    ACCELERATE_USE_CPU=true accelerate launch --config_file recipes/accelerate/fsdp_grpo.yaml \\
        --num_processes 2 --mixed_precision no tests/paco_grpo/fsdp_cpu.py train RECIPE ...

accelerate 1.15 turns an FSDP config into FSDP only on accelerator devices: with
``ACCELERATE_USE_CPU=true`` its ``AcceleratorState`` keeps ``MULTI_CPU`` and the run silently
trains with DDP, and ``accelerate launch --cpu`` starts a single process. Here the CPU state
takes the FSDP plugin the launcher configured, as a GPU state does; from
``Accelerator.prepare`` on everything is accelerate's and torch's own FSDP2 code.

Each rank writes ``OUTPUT_DIR/fsdp_rank<r>.json`` when training ends (the distributed type, the
FSDP2 units holding LoRA weights, the gradient reduce-scatters run, the optimizer steps) and, on
resume, ``OUTPUT_DIR/fsdp_loaded_rank<r>.safetensors``: the LoRA weights (``lora/<key>``) and
EMA (``ema/<i>``) the checkpoint loaded into the sharded model, gathered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType

from paco_grpo import checkpointing
from paco_grpo.grpo_trainer import GRPOTrainer

_state_init = AcceleratorState.__init__


def _init_with_fsdp_on_cpu(self, *args, fsdp_plugin=None, **kwargs):
    _state_init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
    if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
        if self._mixed_precision != "no":
            fsdp_plugin.set_mixed_precision(self._mixed_precision)
        self.fsdp_plugin = fsdp_plugin
        self.distributed_type = DistributedType.FSDP
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP


AcceleratorState.__init__ = _init_with_fsdp_on_cpu

# every gradient reduce-scatter of FSDP2 (one per unit with trainable weights per synced backward)
REDUCE_SCATTERS = [0]
_reduce_scatter = dist.reduce_scatter_single


def _counting_reduce_scatter(*args, **kwargs):
    REDUCE_SCATTERS[0] += 1
    return _reduce_scatter(*args, **kwargs)


dist.reduce_scatter_single = _counting_reduce_scatter


def lora_units(model) -> int:
    """FSDP2 units whose own parameters (not those of a nested unit) include trainable ones."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    count = 0
    for unit in units:
        nested = {
            id(p) for m in unit.modules() if m is not unit and m in units for p in m.parameters()
        }
        count += any(p.requires_grad and id(p) not in nested for p in unit.parameters())
    return count


_load = checkpointing.CheckpointManager.load


def _recording_load(self, path):
    from safetensors.torch import save_file

    epoch = _load(self, path)
    lora = [checkpointing._full(p.detach()) for _, p in self._lora_params()]
    tensors = {f"lora/{k}": t for k, t in zip(self._peft_keys(), lora)}
    if self.ema is not None:
        ema = [checkpointing._full(p) for p in self.ema.shadow_params]
        tensors.update({f"ema/{i}": t for i, t in enumerate(ema)})
    rank = self.accelerator.process_index
    output_dir = self.root.parent
    output_dir.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.contiguous().cpu() for k, v in tensors.items()},
        str(output_dir / f"fsdp_loaded_rank{rank}.safetensors"),
    )
    return epoch


checkpointing.CheckpointManager.load = _recording_load

_train = GRPOTrainer.train


def _recording_train(self):
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    history = _train(self)
    acc = self.accelerator
    record = {
        "distributed_type": str(acc.distributed_type),
        "fsdp_version": acc.state.fsdp_plugin.fsdp_version if acc.state.fsdp_plugin else None,
        "fsdp_module": isinstance(acc.unwrap_model(self.model), FSDPModule),
        "lora_dtensors": sum(isinstance(p, DTensor) for p in self.params),
        "lora_params": len(self.params),
        "lora_units": lora_units(acc.unwrap_model(self.model)),
        "reduce_scatters": REDUCE_SCATTERS[0],
        "optimizer_steps": sum(
            row["train/optimizer_steps"] for row in history if row["epoch"] > self.start_epoch
        ),
        "epochs": [row["epoch"] for row in history],
    }
    path = Path(self.output_dir) / f"fsdp_rank{acc.process_index}.json"
    path.write_text(json.dumps(record))
    return history


GRPOTrainer.train = _recording_train

if __name__ == "__main__":
    from paco_grpo.cli import main

    torch.set_num_threads(1)
    sys.exit(main(sys.argv[1:]))
