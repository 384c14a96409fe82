"""A checkpoint appears whole or not at all, and rotation never costs a complete one: a save
killed half-way leaves every earlier checkpoint, and ``latest`` still resumes from the newest
complete one (what accelerate's own ``total_limit`` rotation does not promise)."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from diffusers import FluxPipeline
from peft import LoraConfig

from paco_grpo.checkpointing import CheckpointManager
from paco_grpo.testing.flux import tiny_flux_components


class KilledWhileSaving(RuntimeError):
    pass


def test_a_save_killed_half_way_loses_no_complete_checkpoint(tmp_path, monkeypatch):
    transformer = tiny_flux_components(seed=0)["transformer"]
    transformer.requires_grad_(False)
    transformer.add_adapter(LoraConfig(r=2, target_modules=["to_q", "to_k"]))
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(
        transformer, torch.optim.AdamW([p for p in transformer.parameters() if p.requires_grad])
    )
    root = tmp_path / "checkpoints"
    manager = CheckpointManager(accelerator, FluxPipeline, model, None, root, save_total_limit=2)
    for epoch in (1, 2):
        manager.save(epoch)

    save_state = accelerator.save_state

    def killed(output_dir):
        save_state(output_dir)  # every file written, then the process dies before the rename
        raise KilledWhileSaving(output_dir)

    monkeypatch.setattr(accelerator, "save_state", killed)
    with pytest.raises(KilledWhileSaving):
        manager.save(3)
    complete = sorted(p.name for p in root.glob("checkpoint-*"))
    assert complete == ["checkpoint-00001", "checkpoint-00002"]
    assert manager.resolve("latest").name == "checkpoint-00002"
    assert manager.load(manager.resolve("latest")) == 2

    monkeypatch.setattr(accelerator, "save_state", save_state)
    manager.save(3)  # the next save clears the leftover and rotates
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-00002", "checkpoint-00003"]
    assert manager.load(manager.resolve("latest")) == 3


def _manager(tmp_path, save_total_limit: int = 2) -> CheckpointManager:
    """A checkpoint manager of a new run (its own run id) over ``tmp_path/checkpoints``."""
    transformer = tiny_flux_components(seed=0)["transformer"]
    transformer.requires_grad_(False)
    transformer.add_adapter(LoraConfig(r=2, target_modules=["to_q"]))
    accelerator = Accelerator(cpu=True)
    model, _ = accelerator.prepare(
        transformer, torch.optim.AdamW([p for p in transformer.parameters() if p.requires_grad])
    )
    root = tmp_path / "checkpoints"
    return CheckpointManager(accelerator, FluxPipeline, model, None, root, save_total_limit)


def test_rotation_keeps_the_checkpoint_just_written_and_never_deletes_another_runs(tmp_path):
    # An earlier run left higher-numbered checkpoints; the new run's low numbers sort first,
    # which a name-sorted rotation deletes as soon as they are written.
    earlier = _manager(tmp_path)
    for epoch in (10, 20):
        earlier.save(epoch)
    root = tmp_path / "checkpoints"
    later = _manager(tmp_path)
    later.save(2)
    assert sorted(p.name for p in root.iterdir()) == [
        "checkpoint-00002", "checkpoint-00010", "checkpoint-00020"
    ]  # fmt: skip
    assert later.resolve("latest").name == "checkpoint-00002"  # the run that saved last
    for epoch in (3, 4):
        later.save(epoch)
    # the later run keeps its two newest, the earlier run keeps both of its own
    assert sorted(p.name for p in root.iterdir()) == [
        "checkpoint-00003", "checkpoint-00004", "checkpoint-00010", "checkpoint-00020"
    ]  # fmt: skip
    assert later.resolve("latest").name == "checkpoint-00004"

    # A run resumed from the earlier run's checkpoint is that run: it rotates that run's.
    resumed = _manager(tmp_path)
    assert resumed.load(root / "checkpoint-00010") == 10
    resumed.save(11)
    assert sorted(p.name for p in root.iterdir()) == [
        "checkpoint-00003", "checkpoint-00004", "checkpoint-00011", "checkpoint-00020"
    ]  # fmt: skip
    assert resumed.resolve("latest").name == "checkpoint-00011"  # not the higher 00020
