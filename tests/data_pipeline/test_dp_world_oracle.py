"""The world's oracle reads back what the renderer drew (the renderer is the ground truth)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from PIL import Image

from data_pipeline.storage import DataPipelineError
from data_pipeline.synthetic import ATTRIBUTES, PanelSpec, SyntheticWorld
from data_pipeline.world_oracle import grid_consistency, prompt_alignment, read_panel
from paco_reward.errors import InputError
from paco_reward.grids import split_grid


@pytest.mark.parametrize("panel_size", [64, 96])
def test_oracle_reads_every_attribute_of_rendered_panels(panel_size):
    world = SyntheticWorld(panel_size=panel_size)
    rng = random.Random(panel_size)
    wrong = {key: 0 for key in (*ATTRIBUTES, "step")}
    n = 150
    for _ in range(n):
        spec = world.random_spec(rng)
        got = read_panel(world.render_panel(spec, seed=rng.getrandbits(32)))
        for key in wrong:
            wrong[key] += getattr(got, key) != getattr(spec, key)
    assert all(count <= 0.02 * n for count in wrong.values()), wrong


def test_oracle_consistency_of_rendered_grids_matches_their_ground_truth():
    world = SyntheticWorld(seed=5, panel_break=0.5)
    prompts = world.make_prompts(12)
    matched = []
    for record in prompts:
        grid = world.render_grid(record, grid_seed=1)
        read = [read_panel(p) for p in split_grid(grid, 2, 2)]
        truth = world.panel_specs(record, grid_seed=1)
        matched.append(grid_consistency(read) == pytest.approx(grid_consistency(truth)))
    assert sum(matched) >= 11
    values = [grid_consistency(world.panel_specs(r, 1)) for r in prompts]
    assert min(values) < 1.0 == max(values)  # the test saw broken and clean grids


def test_oracle_reads_back_a_pipeline_folders_grid_images(synthetic_run):
    from data_pipeline.pipeline import load_synthetic_config
    from data_pipeline.world_oracle import read_back_grids

    work, stats = synthetic_run
    check = read_back_grids(work, load_synthetic_config(work).world())
    assert check["grids"] == stats["grids"] and check["panels"] == 4 * check["grids"]
    assert min(check["accuracy"].values()) >= 0.98, check
    assert check["same_consistency"] >= check["grids"] - 1
    with pytest.raises(DataPipelineError, match="lists no grid"):
        read_back_grids(work, load_synthetic_config(work).world(), limit=0)


def test_prompt_alignment_counts_attributes_and_pips():
    attrs = {"shape": "circle", "colour": "red", "marking": "dots", "palette": "warm",
             "texture": "grain", "outline": 3}  # fmt: skip
    good = [PanelSpec(step=k, **attrs) for k in range(4)]
    assert prompt_alignment(good, attrs) == 1.0
    blue = [PanelSpec(step=k, **{**attrs, "colour": "blue"}) for k in range(4)]
    assert prompt_alignment(blue, attrs) == pytest.approx(6 / 7)
    assert grid_consistency(blue) == 1.0
    assert grid_consistency([good[0], blue[0]]) == pytest.approx(5 / 6)


def test_oracle_rejects_what_is_not_a_panel():
    with pytest.raises(InputError, match="square RGB"):
        read_panel(np.zeros((64, 32, 3), dtype=np.uint8))
    with pytest.raises(DataPipelineError, match="no character"):
        read_panel(Image.new("RGB", (64, 64), (240, 240, 240)))
    with pytest.raises(InputError, match="two panels"):
        grid_consistency([])


def test_oracle_annotated_renders_give_the_synthetic_pipelines_pairs(tmp_path):
    """On the world's own 64-px renders the oracle reads the ground truth, so annotators who
    see its readings label every pair as annotators who see the ground truth do."""
    from data_pipeline.pairs import read_pairs
    from data_pipeline.pipeline import SyntheticConfig, run_oracle_annotated, run_synthetic
    from data_pipeline.storage import write_jsonl
    from data_pipeline.synthetic import SimulatedAnnotators

    config = SyntheticConfig(n_prompts=6, grids_per_prompt=3, layouts=["2x2"], seed=2)
    run_synthetic(tmp_path / "truth", config)
    world = config.world()
    records = world.make_prompts(6, config.layout_tuples())
    write_jsonl(tmp_path / "prompts.jsonl", records)
    world.write_grids(records, tmp_path / "grids", 3)
    stats = run_oracle_annotated(
        tmp_path / "oracle",
        tmp_path / "prompts.jsonl",
        tmp_path / "grids",
        SimulatedAnnotators(seed=2),
    )
    assert stats["oracle_readable_instances"] == stats["instances"]

    def labels(work):
        return sorted(
            (p["prompt_id"], p["panel_a"], p["panel_b"], p["label"]) for p in read_pairs(work)
        )

    assert len(labels(tmp_path / "truth")) > 20
    assert labels(tmp_path / "oracle") == labels(tmp_path / "truth")
    assert (tmp_path / "oracle" / "export" / "hf" / "dataset_dict.json").is_file()


def test_an_instance_with_a_panel_the_oracle_cannot_read_is_not_ranked(tmp_path):
    from data_pipeline.instances import read_instances
    from data_pipeline.pipeline import run_oracle_annotated
    from data_pipeline.rankings import read_merged
    from data_pipeline.storage import write_jsonl

    world = SyntheticWorld(seed=1)
    records = world.make_prompts(2)
    write_jsonl(tmp_path / "prompts.jsonl", records)
    world.write_grids(records, tmp_path / "grids", 3)
    blank = tmp_path / "grids" / records[0]["idx"] / "1.png"
    grid = Image.open(blank).convert("RGB")
    grid.paste(Image.new("RGB", (64, 64), (128, 128, 128)), (0, 0))
    grid.save(blank)
    stats = run_oracle_annotated(tmp_path / "w", tmp_path / "prompts.jsonl", tmp_path / "grids")
    instances = read_instances(tmp_path / "w")
    assert 0 < stats["oracle_readable_instances"] < stats["instances"] == len(instances)
    ranked = set(read_merged(tmp_path / "w"))
    unreadable = [
        i
        for i in instances.values()
        if any(
            p["grid"] == "1" and p["pos"] == 0 and i["prompt_id"] == records[0]["idx"]
            for p in [i["reference"], *i["candidates"]]
        )
    ]
    assert unreadable and not ranked & {i["instance_id"] for i in unreadable}
