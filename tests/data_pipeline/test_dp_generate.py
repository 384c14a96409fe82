"""Stage 2: ingest grids from a folder, or generate them with a tiny offline FLUX."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from data_pipeline.generate import generate_grids, ingest_grids, read_panels
from data_pipeline.prompts import prepare_prompts, read_prompts
from data_pipeline.storage import DataPipelineError, read_jsonl
from data_pipeline.synthetic import SyntheticWorld
from paco_reward.errors import LayoutError


def _synthetic_inputs(tmp_path, layouts=((2, 2), (1, 4), (2, 3))):
    world = SyntheticWorld(seed=5, panel_size=32)
    records = world.make_prompts(3, layouts=list(layouts))
    src = tmp_path / "src.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    world.write_grids(records, tmp_path / "grids", grids_per_prompt=3)
    return world, records, src


def test_ingest_cuts_panels_row_major(tmp_path):
    world, records, src = _synthetic_inputs(tmp_path)
    work = tmp_path / "work"
    prepare_prompts(src, work)
    ingest_grids(tmp_path / "grids", work)
    panels = read_panels(work)
    assert len(read_jsonl(work / "grids.jsonl")) == 9
    assert len(panels) == 3 * (4 + 4 + 6)
    record = records[2]  # 2x3
    grid = np.asarray(world.render_grid(record, 1))
    for p in (q for q in panels if q["prompt_id"] == record["idx"] and q["grid"] == "1"):
        r, c = divmod(p["pos"], 3)
        expected = grid[r * 32 : (r + 1) * 32, c * 32 : (c + 1) * 32]
        assert (np.asarray(Image.open(work / p["path"])) == expected).all()
    # Resumable: a second run keeps panels and writes the same manifest.
    before = (work / "panels.jsonl").read_text()
    ingest_grids(tmp_path / "grids", work)
    assert (work / "panels.jsonl").read_text() == before


def test_ingest_errors(tmp_path):
    _, records, src = _synthetic_inputs(tmp_path, layouts=((2, 2),))
    work = tmp_path / "work"
    prepare_prompts(src, work)
    with pytest.raises(DataPipelineError, match="has >= 5 grids"):
        ingest_grids(tmp_path / "grids", work, min_grids=5)
    Image.new("RGB", (37, 64)).save(tmp_path / "grids" / records[0]["idx"] / "9.png")
    with pytest.raises(LayoutError, match="cannot be cut into a 2x2 grid"):
        ingest_grids(tmp_path / "grids", work)


class CountingPipe:
    """A real pipeline that counts its calls (to check resumption)."""

    def __init__(self, pipe):
        self.pipe, self.calls, self.device = pipe, 0, "cpu"

    def __call__(self, **kwargs):
        self.calls += 1
        return self.pipe(**kwargs)


@pytest.mark.slow
def test_generate_with_tiny_flux_on_real_prompts(tmp_path, t2is_path):
    from diffusers import FluxPipeline

    from paco_grpo.testing import build_tiny_flux

    pipe = CountingPipe(FluxPipeline.from_pretrained(build_tiny_flux(tmp_path / "flux")))
    work = tmp_path / "work"
    prepare_prompts(t2is_path, work, limit=2)
    kwargs = dict(height=64, width=64, num_inference_steps=2, max_sequence_length=32)
    generate_grids(pipe, work, seeds=[0, 1], **kwargs)
    assert pipe.calls == 4
    grids = read_jsonl(work / "grids.jsonl")
    assert len(grids) == 4 and [g["grid"] for g in grids] == ["0", "1", "0", "1"]
    assert grids[0]["prompt_id"] == "0003" and (grids[0]["width"], grids[0]["height"]) == (64, 64)
    panels = read_panels(work)
    assert len(panels) == 16 and Image.open(work / panels[0]["path"]).size == (32, 32)
    first = np.asarray(Image.open(work / "grids" / grids[0]["prompt_id"] / "0.png"))
    second = np.asarray(Image.open(work / "grids" / grids[0]["prompt_id"] / "1.png"))
    assert not (first == second).all()  # seeds give different grids
    # Killed and re-run: existing grids are not generated again; a new seed is.
    generate_grids(pipe, work, seeds=[0, 1, 2], **kwargs)
    assert pipe.calls == 6 and len(read_panels(work)) == 24
    with pytest.raises(ValueError, match="seeds must name >= 2 grids"):
        generate_grids(pipe, work, seeds=[0])


@pytest.mark.slow
def test_t2is_prompts_through_every_stage_with_tiny_flux(tmp_path, t2is_path, teacher_server):
    """Real T2IS prompts -> tiny FLUX grids -> 48 instances per prompt -> two annotators'
    rankings -> pairs -> reasons from an OpenAI-compatible teacher -> DatasetDict."""
    import random

    from datasets import load_from_disk
    from diffusers import FluxPipeline

    from data_pipeline.export import ExportConfig, export_dataset
    from data_pipeline.instances import build_instances, read_instances
    from data_pipeline.pairs import build_pairs, read_pairs
    from data_pipeline.rankings import ingest_rankings
    from data_pipeline.reasons import OpenAITeacher, annotate_reasons
    from data_pipeline.stats import write_stats
    from paco_grpo.testing import build_tiny_flux

    pipe = FluxPipeline.from_pretrained(build_tiny_flux(tmp_path / "flux"))
    work = tmp_path / "work"
    prepare_prompts(t2is_path, work, limit=3)
    generate_grids(
        pipe,
        work,
        seeds=[0, 1, 2, 3],
        height=64,
        width=64,
        num_inference_steps=1,
        max_sequence_length=16,
    )
    build_instances(work)
    instances = read_instances(work)
    assert len(instances) == 3 * 48
    rng = random.Random(0)
    lines = []
    for annotator in ("ann1", "ann2"):
        for instance_id in instances:
            order = list(range(4))
            rng.shuffle(order)
            lines.append(
                json.dumps({"instance_id": instance_id, "annotator": annotator, "ranking": order})
            )
    (tmp_path / "rankings.jsonl").write_text("\n".join(lines) + "\n")
    ingest_rankings(work, tmp_path / "rankings.jsonl")
    build_pairs(work)
    pairs = read_pairs(work)
    assert pairs and {p["category"] for p in pairs} <= {
        "Character Generation", "Process Generation", "Instruction Generation",
        "Design Style Generation", "Story Generation",
    }  # fmt: skip
    url, state = teacher_server()
    stats = annotate_reasons(
        pairs,
        OpenAITeacher(url, "teacher"),
        work / "reasons.jsonl",
        image_root=work,
        concurrency=8,
        progress=False,
    )
    assert stats.done == len(pairs) == len(state.requests)
    export_dataset(work, config=ExportConfig(test_fraction=0.34))
    ds = load_from_disk(str(work / "export" / "hf"))
    row = ds["train"][0]
    assert row["image_a"].size == (32, 32) and "Looking at the 2 images" in row["reasons"]
    assert row["prompt"] == read_prompts(work)[row["prompt_id"]]["theme"]
    summary = write_stats(work)
    assert summary["instances_per_prompt"] == 48 and summary["agreement"]["annotators"] == 2
    assert (work / "stats.png").stat().st_size > 1000
