"""Run ``paco-grpo train`` as launched, recording what each rank sampled, scored and trained
(a helper of ``test_grpo_launch.py``, started by ``accelerate launch``), then resume the
run's last checkpoint in the same processes. Several runs separated by ``--next`` run one
after the other in the same processes, so a launch pays the processes' start-up once.

    ACCELERATE_USE_CPU=1 accelerate launch --config_file CFG tests/paco_grpo/launch_probe.py \\
        OUT_PREFIX train RECIPE --flag value ... [--next train RECIPE2 ...]

Writes ``OUT_PREFIX.<run>.rank<r>.json`` per run: per epoch the slots, items, local rewards
and the advantages the rank trained on; the LoRA digest after training and after resuming.
The main process prints ``launch_probe: run <run>`` before each run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

from paco_grpo import cli
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.rollout import Rollout

RECORD: dict = {"epochs": []}
TRAINERS: list[GRPOTrainer] = []


def _digest(trainer: GRPOTrainer) -> str:
    digest = hashlib.sha256()
    for p in trainer.params:
        digest.update(p.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _record_rollout(sample_epoch):
    def wrapped(self, epoch, *args, **kwargs):
        rollout = sample_epoch(self, epoch, *args, **kwargs)
        RECORD["epochs"].append(
            {
                "epoch": epoch,
                "slots": [s["slot"] for s in rollout.samples],
                "items": [s["item"] for s in rollout.samples],
                "rewards": {n: v.tolist() for n, v in rollout.rewards.items()},
            }
        )
        return rollout

    return wrapped


def _record_advantages(train_epoch):
    def wrapped(self, samples, advantages, epoch):
        RECORD["epochs"][-1]["advantages"] = [float(a) for a in advantages]
        RECORD["group_keys"] = [str(self.group_key(it)) for it in self.items]
        return train_epoch(self, samples, advantages, epoch)

    return wrapped


def _keep(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        TRAINERS.append(self)

    return wrapped


def run(out_prefix: str, index: int, argv: list[str]) -> int:
    RECORD.clear()
    RECORD["epochs"] = []
    TRAINERS.clear()  # the previous run's models go
    if os.environ.get("RANK", "0") == "0":
        print(f"launch_probe: run {index}", flush=True)
    code = cli.main(argv)
    if code:
        return code
    trained = TRAINERS[-1]
    RECORD["rank"] = trained.accelerator.process_index
    RECORD["device"] = str(trained.accelerator.device)
    RECORD["reward_devices"] = {
        n: str(getattr(r, "device", None)) for n, r in trained.rewards.items()
    }
    RECORD["optimizer_steps_per_epoch"] = trained.optimizer_steps_per_epoch
    RECORD["lora_trained"] = _digest(trained)
    # resume the last checkpoint in these processes: the LoRA loads as it was saved
    config = trained.config
    config.resume_from_checkpoint = "latest"
    resumed = GRPOTrainer(config)
    RECORD["resumed_epoch"] = resumed.start_epoch
    RECORD["lora_resumed"] = _digest(resumed)
    with open(f"{out_prefix}.{index}.rank{RECORD['rank']}.json", "w") as fh:
        json.dump(RECORD, fh)
    return 0


def main(out_prefix: str, argv: list[str]) -> int:
    Rollout.sample_epoch = _record_rollout(Rollout.sample_epoch)
    GRPOTrainer.train_epoch = _record_advantages(GRPOTrainer.train_epoch)
    GRPOTrainer.__init__ = _keep(GRPOTrainer.__init__)
    runs = [[]]
    for arg in argv:
        if arg == "--next":
            runs.append([])
        else:
            runs[-1].append(arg)
    for index, run_argv in enumerate(runs):
        code = run(out_prefix, index, run_argv)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
