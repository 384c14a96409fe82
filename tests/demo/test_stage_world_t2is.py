"""The T2IS-Bench-in-miniature stage at tiny scale: ``paco-eval t2is`` generates the world
cases before and after RL (the run's LoRA, from its folder), judges and reports them; the
sub-images are what diffusers' own FluxPipeline draws for each case's seed, with and without
the LoRA, and the oracle's rows read those grids."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import demo.stage_world_t2is as stage
from demo import stage_report
from demo.world_generator import GeneratorConfig, held_out_prompts
from demo.world_judge import judge_grids
from paco_eval.t2is.generate import case_seed
from paco_reward.grids import split_grid


def write_rl_checkpoint(generator, folder, seed: int = 0):
    """A GRPO run folder whose last checkpoint holds a random LoRA of the recipe's modules
    (what the world_grpo stage leaves), in the pipeline's own LoRA format."""
    from diffusers import FluxPipeline
    from peft import LoraConfig, get_peft_model_state_dict

    pipe = FluxPipeline.from_pretrained(generator)
    transformer = pipe.transformer
    transformer.add_adapter(LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                       target_modules=["attn.to_q", "attn.to_k", "attn.to_v"]))  # fmt: skip
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in transformer.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.5)
    checkpoint = folder / "checkpoints" / "checkpoint-2"
    FluxPipeline.save_lora_weights(
        checkpoint, transformer_lora_layers=get_peft_model_state_dict(transformer)
    )
    return checkpoint


def pipeline_grids(generator, records, lora=None):
    """Each case's grid as diffusers' FluxPipeline draws it for the case's seed."""
    from diffusers import FluxPipeline

    pipe = FluxPipeline.from_pretrained(generator)
    if lora is not None:
        pipe.load_lora_weights(lora)
    grids = []
    for number, record in enumerate(records, 1):
        generator_ = torch.Generator("cpu").manual_seed(case_seed(0, stage.case_id(record, number)))
        grids.append(pipe(prompt=record["prompt"], height=64, width=64, num_inference_steps=stage.STEPS,
                          guidance_scale=3.5, max_sequence_length=64, generator=generator_).images[0])  # fmt: skip
    return grids


def test_the_stage_reports_the_generator_before_and_after_its_rl_run(
    tmp_path, monkeypatch, world_ctx
):
    monkeypatch.setattr(stage, "HELD_OUT", 3)
    monkeypatch.setattr(stage, "STEPS", 2)
    generator = world_ctx.artifacts["world_generator"]
    checkpoint = write_rl_checkpoint(generator, tmp_path / "out" / "world_grpo" / "paco_seed0")
    stage.run(world_ctx)

    (section,) = world_ctx.report
    out = tmp_path / "out" / "world_t2is"
    reports = {w: json.loads((out / w / "report.json").read_text()) for w in ("before", "after")}
    records = held_out_prompts(GeneratorConfig(seed=world_ctx.seed), 3)
    for when, lora in (("before", None), ("after", checkpoint)):
        report = reports[when]
        assert report["coverage"]["images_found"] == report["coverage"]["images_expected"] == 12
        assert report["protocol"]["generation"]["lora"] == (
            str(checkpoint.parents[1]) if lora else None
        )
        grids = pipeline_grids(generator, records, lora)
        for number, (record, grid) in enumerate(zip(records, grids), 1):
            case = stage.case_id(record, number)
            for k, panel in enumerate(split_grid(grid, 2, 2)):
                drawn = np.asarray(Image.open(out / when / "images" / f"{case}_{k:04d}.png"))
                assert np.array_equal(drawn, np.asarray(panel)), (when, case, k)
        oracle = judge_grids(grids, records)
        (row,) = [r for r in section.rows if r[0] == "oracle consistency"]
        assert row[1 if when == "before" else 2] == pytest.approx(oracle["consistency"])
    assert reports["before"]["table"] != reports["after"]["table"]  # the LoRA changed the images
    for column, before, after, change in section.rows:
        if not column.startswith("oracle"):
            assert (before, after) == (
                reports["before"]["table"][column],
                reports["after"]["table"][column],
            )
        assert change == pytest.approx(after - before)
    # no aesthetics, so no Avg
    assert [r[0] for r in section.rows if not r[0].startswith("oracle")] == list(stage.TABLE)
    notes = " ".join(reports["after"]["notes"])
    assert "Aesthetics: not scored" in notes and "PaCo-RL's GRPO training prompts" not in notes

    stage_report.run(world_ctx)
    assert "T2IS-Bench in miniature" in (tmp_path / "out" / "report.md").read_text()


def test_without_an_rl_run_the_stage_says_so_and_writes_nothing(tmp_path, world_ctx, capsys):
    stage.run(world_ctx)
    assert "run the world_grpo stage" in capsys.readouterr().out
    assert not world_ctx.report and not (tmp_path / "out" / "world_t2is").exists()
