"""``paco-data``: every stage as a subcommand, run in sequence on synthetic inputs."""

from __future__ import annotations

import json

import pytest

from data_pipeline.cli import main


def test_every_step_in_sequence(tmp_path, capsys):
    work = tmp_path / "work"
    argv = ["synthetic", str(work), "--n_prompts", "4", "--grids-per-prompt", "3"]
    assert main([*argv, "--layouts", "2x2", "1x3"]) == 0
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
    assert main(["grids", str(work), "--from_dir", str(work / "inputs" / "grids")]) == 0
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


def _one_error_line(err: str, *parts: str) -> None:
    """A failed command says one line, ``paco-data: error: ...``, naming the input."""
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith("paco-data: error: ")
    for part in parts:
        assert part in line, (part, line)


def test_exit_codes_and_one_line_errors(tmp_path, capsys):
    """0 done, 1 an error in the command (one line naming the input, no traceback),
    2 a usage error (argparse)."""
    assert (
        main(["synthetic", str(tmp_path / "w"), "--n_prompts", "1", "--grids-per-prompt", "2"]) == 0
    )
    assert "synthetic prompts ->" in capsys.readouterr().out
    missing = tmp_path / "none.jsonl"
    errors = [
        (["grids", str(tmp_path)], ["exactly one of --from_dir"]),
        (["reasons", str(tmp_path), "--teacher", "openai"], ["needs --base_url and --model"]),
        (["prompts", str(tmp_path), "--input", str(missing)], ["No JSONL file", str(missing)]),
        (["simulate-rankings", str(tmp_path)], ["synthetic.json"]),
        (["instances", str(tmp_path), "--rule", "bogus"], ["rule must be one of", "'bogus'"]),
        (["export", str(tmp_path), "--test_fraction", "1.5"], ["test_fraction", "1.5"]),
        (["export", str(tmp_path), "--dataset_name", "a b"], ["dataset_name", "'a b'"]),
    ]
    for argv, parts in errors:
        assert main(argv) == 1, argv
        _one_error_line(capsys.readouterr().err, *parts)
    usage = [
        ["instances", str(tmp_path), "--shuffle"],  # the old flag: now --shuffle_candidates
        ["prompts", str(tmp_path)],  # --input is required
        ["rankings", str(tmp_path), "--method", "mean"],  # not a choice
        ["nosuchstep", str(tmp_path)],
        [],
    ]
    for argv in usage:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2, argv
        assert "usage: paco-data" in capsys.readouterr().err


def test_flags_are_the_config_fields(tmp_path):
    """Each stage's flags are its config dataclass's fields, under both spellings, and the
    config the stage records holds nothing else."""
    from dataclasses import asdict

    from data_pipeline.arguments import ExportArguments, PairsArguments, config_part
    from data_pipeline.export import ExportConfig
    from data_pipeline.pairs import LabelRule
    from paco_reward.command_line import parse_config

    args = parse_config(
        ExportArguments,
        [str(tmp_path), "--test-fraction", "0.25", "--dataset_name", "mine", "--no-llamafactory",
         "--require_reasons", "false", "--rank_ties", "skip", "--out", "o"],
    )  # fmt: skip
    assert (args.work_dir, args.out) == (str(tmp_path), "o")
    assert asdict(config_part(args, ExportConfig)) == asdict(
        ExportConfig(test_fraction=0.25, dataset_name="mine", llamafactory=False,
                     require_reasons=False, rank_ties="skip")
    )  # fmt: skip
    args = parse_config(PairsArguments, [str(tmp_path), "--top-k", "2", "--ties", "all"])
    assert config_part(args, LabelRule) == LabelRule(top_k=2, ties="all")


@pytest.mark.slow
def test_the_console_script(tmp_path):
    """The installed ``paco-data`` as a user runs it: exit codes, one line, -v tracebacks."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("paco-data")
    assert script.is_file(), "the paco-data console script is not installed; run `make test`."

    def run(*argv):
        return subprocess.run([str(script), *argv], capture_output=True, text=True, cwd=tmp_path)

    missing = str(tmp_path / "nowhere.jsonl")
    done = run("prompts", str(tmp_path), "--input", missing)
    assert done.returncode == 1
    _one_error_line(done.stderr, missing)
    done = run("stats", str(tmp_path), "--export_dir")
    assert done.returncode == 2 and "expected one argument" in done.stderr


def test_verbose_logs_the_traceback(tmp_path, capsys, caplog):
    missing = str(tmp_path / "nowhere.jsonl")
    assert main(["prompts", str(tmp_path), "--input", missing, "-v"]) == 1
    _one_error_line(capsys.readouterr().err, missing)
    assert "Traceback" in caplog.text and "DataPipelineError" in caplog.text


@pytest.mark.slow
def test_grids_generated_by_a_diffusers_pipeline_folder(tmp_path, t2is_path):
    from data_pipeline.storage import read_jsonl
    from paco_grpo.testing import build_tiny_flux

    flux = build_tiny_flux(tmp_path / "flux")
    work = tmp_path / "work"
    assert main(["prompts", str(work), "--input", str(t2is_path), "--limit", "1"]) == 0
    args = ["grids", str(work), "--pipeline", str(flux), "--seeds", "0", "1", "--steps", "1"]
    args += ["--height", "32", "--width", "32", "--max_sequence_length", "16", "--device", "cpu"]
    assert main(args) == 0
    assert len(read_jsonl(work / "panels.jsonl")) == 8
    assert (work / "grids" / "0003" / "1.png").is_file()
