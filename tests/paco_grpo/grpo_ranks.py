"""Run a GRPO recipe under torchrun and write what each rank saw (a helper of
``test_grpo_distributed.py``, started as ``torchrun --nproc_per_node N grpo_ranks.py``).

    python -m torch.distributed.run --nproc_per_node 2 tests/paco_grpo/grpo_ranks.py \\
        RECIPE OUT_PREFIX key=value ...
"""

from __future__ import annotations

import hashlib
import json
import sys

import yaml

from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.policy import REFERENCE_ADAPTER, adapter_params


def main(recipe: str, out_prefix: str, *pairs: str) -> None:
    overrides = {k: yaml.safe_load(v) for k, v in (p.split("=", 1) for p in pairs)}
    trainer = GRPOTrainer(GRPOConfig.from_yaml(recipe, overrides))
    history = trainer.train()
    digest = hashlib.sha256()
    for p in trainer.params:
        digest.update(p.detach().cpu().numpy().tobytes())
    reference = hashlib.sha256()  # GARDO's reference adapter (kl_reference: adapter)
    for _, p in sorted(adapter_params(trainer.transformer, REFERENCE_ADAPTER).items()):
        reference.update(p.detach().cpu().numpy().tobytes())
    rank = trainer.accelerator.process_index
    rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in history]
    with open(f"{out_prefix}.rank{rank}.json", "w") as fh:
        json.dump({"history": rows, "lora_sha256": digest.hexdigest(),
                   "reference_sha256": reference.hexdigest()}, fh)  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:])
