"""``paco-data``: every stage as a subcommand, run in sequence on synthetic inputs."""

from __future__ import annotations

import json

import pytest

from data_pipeline.cli import main


def test_every_step_in_sequence(tmp_path, capsys):
    work = tmp_path / "work"
    assert (
        main(["synthetic", str(work), "--prompts", "4", "--grids", "3", "--layouts", "2x2", "1x3"])
        == 0
    )
    assert (
        main(
            [
                "prompts",
                str(work),
                "--input",
                str(work / "inputs" / "prompts.jsonl"),
                "--source",
                "synthetic",
            ]
        )
        == 0
    )
    assert main(["grids", str(work), "--from", str(work / "inputs" / "grids")]) == 0
    assert main(["instances", str(work), "--rule", "other_grid"]) == 0
    assert main(["simulate-rankings", str(work)]) == 0
    assert (
        main(
            ["rankings", str(work), str(work / "inputs" / "rankings.jsonl"), "--method", "majority"]
        )
        == 0
    )
    edits = tmp_path / "edits.jsonl"
    panel = str(work / "panels" / "syn00000" / "0_0.png")
    other = str(work / "panels" / "syn00000" / "1_0.png")
    edits.write_text(
        json.dumps({"id": "e1", "source": panel, "edited": other, "instruction": "add a hat"})
        + "\n"
    )
    args = ["pairs", str(work), "--top-k", "1", "--bottom-k", "1", "--edit-pairs", str(edits)]
    assert main(args) == 0
    assert main(["reasons", str(work), "--no-progress"]) == 0
    assert main(["export", str(work), "--test-fraction", "0.25"]) == 0
    capsys.readouterr()
    assert main(["stats", str(work)]) == 0
    table = capsys.readouterr().out
    assert main(["probe", str(work)]) == 0
    assert "image_b_only_auc" in capsys.readouterr().out
    assert "instances_per_prompt" in table and "pairs.consistent" in table
    stats = json.loads((work / "stats.json").read_text())
    # 2 prompts of 2x2 (3 grids x 2 others x 4 panels) + 2 of 1x3 (3 x 2 x 3).
    assert stats["instances"] == 2 * 24 + 2 * 18
    assert stats["agreement"]["method"] == "majority"
    assert stats["export"]["test_prompts"] == 2  # ceil(0.25 * 5 prompts: 4 synthetic + 1 edit)
    assert stats["reasons"]["done"] == stats["pairs"]["total"]
    assert stats["pairs"]["by_source"]["edit"] == 1
    from datasets import load_from_disk

    ds = load_from_disk(str(work / "export" / "hf"))
    edit_rows = [r for s in ds.values() for r in s if r["source"] == "edit"]
    assert len(edit_rows) == 1 and edit_rows[0]["template"] == "edit_consistency"
    assert "Instruction: 'add a hat'" in edit_rows[0]["messages"][0]["content"][2]["text"]


def test_cli_errors(tmp_path, capsys):
    assert main(["grids", str(tmp_path)]) == 2
    assert "exactly one of --from" in capsys.readouterr().err
    assert main(["reasons", str(tmp_path), "--teacher", "openai"]) == 2
    assert "needs --base-url and --model" in capsys.readouterr().err
    assert main(["prompts", str(tmp_path), "--input", str(tmp_path / "none.jsonl")]) == 1
    assert "No JSONL file" in capsys.readouterr().err
    assert main(["simulate-rankings", str(tmp_path)]) == 1
    assert "synthetic.json" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["instances", str(tmp_path), "--rule", "bogus"])


@pytest.mark.slow
def test_grids_generated_by_a_diffusers_pipeline_folder(tmp_path, t2is_path):
    from data_pipeline.storage import read_jsonl
    from paco_grpo.testing import build_tiny_flux

    flux = build_tiny_flux(tmp_path / "flux")
    work = tmp_path / "work"
    assert main(["prompts", str(work), "--input", str(t2is_path), "--limit", "1"]) == 0
    args = ["grids", str(work), "--pipeline", str(flux), "--seeds", "0", "1", "--steps", "1"]
    args += ["--height", "32", "--width", "32", "--max-sequence-length", "16", "--device", "cpu"]
    assert main(args) == 0
    assert len(read_jsonl(work / "panels.jsonl")) == 8
    assert (work / "grids" / "0003" / "1.png").is_file()
