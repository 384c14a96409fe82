"""Run ``paco-grpo train`` as launched, recording what each rank sampled, scored and trained
(a helper of ``test_grpo_launch.py``, started by ``accelerate launch``), then resume the
run's last checkpoint in the same processes. Several runs separated by ``--next`` run one
after the other in the same processes, so a launch pays the processes' start-up once.

    ACCELERATE_USE_CPU=1 accelerate launch --config_file CFG tests/paco_grpo/launch_probe.py \\
        OUT_PREFIX train RECIPE --flag value ... [--next train RECIPE2 ...]

Writes ``OUT_PREFIX.<run>.rank<r>.json`` per run: per epoch the slots, items, local rewards
and the advantages the rank trained on; the LoRA digest after training and after resuming;
the rank's node (torchrun's ``GROUP_RANK``) and, for each reward scored on a server, the
server's URL and its ``/health`` once training is over (every scoring request of the run
answered: the epoch's rewards are gathered before it trains). The main process prints
``launch_probe: run <run>`` before each run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import httpx
import numpy as np

from paco_grpo import cli
from paco_grpo.advantages import compute_advantages
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.rollout import Rollout

RECORD: dict = {"epochs": []}
TRAINERS: list[GRPOTrainer] = []


def _digest(trainer: GRPOTrainer) -> str:
    digest = hashlib.sha256()
    for p in trainer.params:
        digest.update(p.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _reward_servers(trainer: GRPOTrainer) -> dict[str, dict[str, dict]]:
    """``{reward: {server URL: its /health now}}`` for the rewards scored on servers."""
    servers = {}
    for name, reward in trainer.rewards.items():
        backend = getattr(getattr(reward, "evaluator", None), "backend", None)
        urls = getattr(backend, "base_urls", None) or []
        servers[name] = {
            url: httpx.get(url.removesuffix("/v1") + "/health", timeout=30).json() for url in urls
        }
    return {name: health for name, health in servers.items() if health}


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
    def wrapped(self, samples, advantages, epoch, *rest, **kwargs):  # rest: GARDO's kl_gate
        RECORD["epochs"][-1]["advantages"] = [float(a) for a in advantages]
        RECORD["group_keys"] = [str(self.group_key(it)) for it in self.items]
        return train_epoch(self, samples, advantages, epoch, *rest, **kwargs)

    return wrapped


def _keep(init):
    def wrapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        TRAINERS.append(self)
        RECORD.setdefault("lora_start", _digest(self))  # fresh, or as a resumed run loaded it

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
    RECORD["node"] = int(os.environ.get("GROUP_RANK", "0"))
    RECORD["reward_servers"] = _reward_servers(trained)
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


# ---------------------------------------------------------------- reading the records
def read_ranks(out_prefix, run: int, nproc: int) -> list[dict]:
    """The records of run ``run``, one per rank, in rank order."""
    return [json.loads(Path(f"{out_prefix}.{run}.rank{r}.json").read_text()) for r in range(nproc)]


def gathered_advantages(
    cfg: GRPOConfig, ranks: list[dict], epoch: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The advantages the ranks trained on in their ``epoch``-th recorded epoch, in rank
    order, and those computed in one process from the rewards gathered over all ranks."""
    records = [r["epochs"][epoch] for r in ranks]
    gathered = {n: np.concatenate([e["rewards"][n] for e in records]) for n in cfg.rewards}
    keys = ranks[0]["group_keys"]
    items = [i for e in records for i in e["items"]]
    expected = compute_advantages(
        gathered,
        dict(cfg.rewards),
        [keys[i] for i in items],
        aggregator=cfg.aggregator,
        threshold=cfg.log_taming_threshold,
        std_scope=cfg.std_scope,
        std_floor=cfg.std_floor,
        normalization=cfg.normalization,
    ).advantages
    return np.concatenate([e["advantages"] for e in records]), expected


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
