"""``paco-eval consistency_rank`` and ``paco-eval edit_reward_bench`` end to end through
:func:`paco_eval.cli.main` on the synthetic fixtures of the old benchmark tests, the judge the
tiny PaCo evaluator's folder (``--judge paco:<folder>``) or a baseline: the report's numbers
equal an independent computation (scipy rank correlations; accuracies from direct
``score_edit`` calls) and the old multi-scorer command's, a re-run makes no judge call, a
results file of other inputs is refused, and a mistyped flag is a usage error."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks import consistency_rank as old_cr
from benchmarks import edit_reward_bench as old_erb
from benchmarks.common import NamedScorer
from benchmarks.synthetic import make_consistency_rank_set, make_edit_reward_set
from paco_eval.cli import main
from paco_reward.baselines import PixelScorer
from paco_reward.metrics import RANKING_METRICS
from tests.benchmarks.conftest import scipy_item_metrics

HUMAN = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 0, 2, 3], [0, 2, 3, 1], [2, 0, 3, 1]]
CATEGORIES = ["character", "style", "character", "style", "character"]
EDIT_ROWS = [
    {"task_type": "subject-add", "dimension": "consistency", "deltas": [10, 80], "keys": ["a0", "a1"], "image": 0},
    {"task_type": "subject-add", "dimension": "prompt_following", "deltas": [10, 80], "keys": ["a0", "a1"], "image": 0},
    {"task_type": "subject-remove", "dimension": "consistency", "deltas": [90, 20]},
    {"task_type": "color_alter", "dimension": "overall", "deltas": [30, 30]},
    {"task_type": "compose", "dimension": "consistency", "deltas": [40, 10]},
    {"task_type": "motion_change", "dimension": "consistency", "deltas": [10, 50, 5]},
]  # fmt: skip


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _no_judge_calls(monkeypatch) -> None:
    """Any scoring call from here on fails the test (a resumed run must make none)."""

    def refuse(*args, **kwargs):
        raise AssertionError("a judge call on a resumed run")

    from paco_reward import PacoReward

    monkeypatch.setattr(PacoReward, "score_pairs", refuse)
    monkeypatch.setattr(PixelScorer, "score_pairs", refuse)


@pytest.fixture
def rank_set(tmp_path):
    return make_consistency_rank_set(tmp_path / "cr", HUMAN, categories=CATEGORIES, seed=1)


@pytest.fixture
def edit_set(tmp_path):
    return make_edit_reward_set(tmp_path / "erb", EDIT_ROWS)


def test_the_three_judge_benchmarks_share_their_flags():
    from paco_eval.consistency_rank.benchmark import ConsistencyRankConfig
    from paco_eval.edit_reward.benchmark import EditRewardConfig
    from paco_eval.judge_bench import JudgeBenchArguments
    from paco_eval.vcreward.benchmark import VCRewardConfig

    shared = {f.name for f in dataclasses.fields(JudgeBenchArguments)}
    assert {"judge", "data", "output_dir", "limit", "mode", "adapter", "device"} <= shared
    for config in (ConsistencyRankConfig, EditRewardConfig, VCRewardConfig):
        assert shared <= {f.name for f in dataclasses.fields(config)}, config
        assert config(data="d", judge="paco:runs/x").judge_spec("judge").kind == "paco"
        assert config(data="d", judge="runs/x").judge_spec("judge").kind == "paco"  # a train folder
    assert ConsistencyRankConfig(data="d", judge="pixel:32").judge_spec("judge").target == "32"
    assert EditRewardConfig(data="d", judge="clip:openai/clip").judge_spec("judge").kind == "clip"


def test_consistency_rank_paco_judge_equals_scipy_and_resumes(rank_set, tmp_path, tiny_model_dir,
                                                              tiny_reward, monkeypatch, capsys):  # fmt: skip
    out = tmp_path / "eval"
    args = ["--data", str(rank_set["data_dir"]), "--judge", f"paco:{tiny_model_dir}", "--device", "cpu",
            "--output_dir", str(out), "--no_progress"]  # fmt: skip
    assert main(["consistency_rank", "all", *args]) == 0
    report = _report(out)
    # Independently: the evaluator's scores of (reference, candidate) with the "rank" template,
    # ordered highest first (ties: lower index first), and scipy's correlations.
    per_item = []
    for item in rank_set["items"]:
        folder = rank_set["data_dir"] / "images" / item["folder"]
        ref = folder / json.loads(
            (rank_set["data_dir"] / "consistency_full_rank.jsonl").read_text().splitlines()[
                rank_set["items"].index(item)])["ref_image"]  # fmt: skip
        scores = tiny_reward.score_pairs([(ref, folder / c) for c in item["comp_images"]], template="rank")
        per_item.append(scipy_item_metrics(list(np.argsort(-np.asarray(scores), kind="stable")), item["human_order"]))
    for metric in RANKING_METRICS:
        assert report["table"][metric] == pytest.approx(np.mean([m[metric] for m in per_item]), abs=1e-9), metric
    assert report["coverage"]["items_judged"] == 5 and report["coverage"]["items_not_judged_yet"] == 0
    assert report["protocol"]["judge"] == {"spec": f"paco:{tiny_model_dir}", "adapter": None, "template": "rank"}
    assert report["paper_rows"]["paper: PaCo-Reward-7B"]["accuracy"] == 0.449
    assert set(report["groups"]) == {"character", "style"} and len(report["items"]) == 5
    md = (out / "report.md").read_text()
    assert "| paper: PaCo-Reward-7B | 0.4490 |" in md and "## Coverage" in md
    # The same numbers as the old multi-scorer command on the same evaluator.
    from paco_eval.pair_scorers import PacoPairScorer

    old = old_cr.run_benchmark(rank_set["data_dir"], [NamedScorer("tiny", PacoPairScorer(tiny_reward), "x")],
                               tmp_path / "old", progress=False)["tiny"]["overall"]  # fmt: skip
    for metric in RANKING_METRICS:
        assert report["table"][metric] == pytest.approx(old[metric], abs=1e-9), metric
    # A re-run makes no judge call and writes the same report.
    _no_judge_calls(monkeypatch)
    capsys.readouterr()
    assert main(["consistency_rank", "all", *args]) == 0
    assert "0 judged, 5 already in" in capsys.readouterr().out
    assert _report(out)["table"] == report["table"]
    # A candidate replaced under the same name: the results file is another run's.
    item = rank_set["items"][0]
    Image.new("RGB", (64, 64), (7, 7, 7)).save(rank_set["data_dir"] / "images" / item["folder"] / item["comp_images"][0])
    assert main(["consistency_rank", "report", *args]) == 1
    assert "holds results for other inputs" in capsys.readouterr().err


def test_consistency_rank_pixel_baseline_equals_the_old_command(rank_set, tmp_path):
    out = tmp_path / "eval"
    for mode in ("default", "reference"):
        assert main(["consistency_rank", "all", "--data", str(rank_set["data_dir"]), "--judge", "pixel",
                     "--output_dir", str(out), "--mode", mode, "--no_progress"]) == 0  # fmt: skip
        report = _report(out)
        ties = {"default": "first", "reference": "last"}[mode]
        old = old_cr.run_benchmark(rank_set["data_dir"], [NamedScorer("p", PixelScorer(), "pixel")],
                                   tmp_path / f"old-{mode}", ties=ties, progress=False)["p"]  # fmt: skip
        for metric in RANKING_METRICS:
            assert report["table"][metric] == pytest.approx(old["overall"][metric], abs=1e-12), metric
            assert report["groups"]["style"][metric] == pytest.approx(old["by_category"]["style"][metric], abs=1e-12)
        assert report["protocol"]["ties"] == ties and report["mode"] == mode
    expected = [scipy_item_metrics(it["pixel_order"], it["human_order"]) for it in rank_set["items"]]
    assert report["table"]["kendall_tau_ref"] == pytest.approx(np.mean([m["kendall_tau_ref"] for m in expected]))


def test_edit_reward_paco_judge_equals_score_edit_and_resumes(edit_set, tmp_path, tiny_model_dir, tiny_reward,
                                                              monkeypatch, capsys):  # fmt: skip
    out = tmp_path / "eval"
    args = ["--data", str(edit_set), "--judge", f"paco:{tiny_model_dir}", "--device", "cpu",
            "--output_dir", str(out), "--no_progress", "--batch_outputs", "4"]  # fmt: skip
    assert main(["edit_reward_bench", "all", *args]) == 0
    report = _report(out)
    # Independently: PacoReward.score_edit of every output, strict accuracy per task type,
    # then the unweighted mean over task types.
    from paco_eval.edit_reward.bench import load_edit_reward_bench

    ds = load_edit_reward_bench(edit_set)
    hits: dict = {}
    for row in ds:
        edits = [tiny_reward.score_edit(row["input_image"], o, row["instruction"]) for o in row["output_images"]]
        best, *others = [getattr(e, row["dimension"]) for e in edits]
        for other in others:
            hits.setdefault(row["dimension"], {}).setdefault(row["task_type"], []).append(best > other)
    for dim, tasks in hits.items():
        want = np.mean([np.mean(v) for v in tasks.values()])
        assert report["table"][dim] == pytest.approx(want, abs=1e-6), dim
        for task, v in tasks.items():
            assert report["groups"][task][dim] == pytest.approx(np.mean(v), abs=1e-6), (task, dim)
    assert report["table"]["prompt_following"] is not None and report["coverage"]["outputs_scored"] == 11
    assert report["protocol"]["judge"]["templates"] == {"consistency": "edit_consistency",
                                                        "prompt_following": "edit_following"}  # fmt: skip
    assert "| paper: PaCo-Reward-7B | 0.7770 | 0.7090 | 0.7510 |" in (out / "report.md").read_text()
    _no_judge_calls(monkeypatch)
    capsys.readouterr()
    assert main(["edit_reward_bench", "all", *args]) == 0
    assert "0 output(s) scored, 11 already in" in capsys.readouterr().out
    assert _report(out)["table"] == report["table"]


def test_edit_reward_pixel_baseline_equals_the_old_command_and_stale(edit_set, tmp_path, capsys):
    out = tmp_path / "eval"
    args = ["--data", str(edit_set), "--judge", "pixel", "--output_dir", str(out), "--no_progress"]
    assert main(["edit_reward_bench", "judge", *args, "--limit", "3"]) == 0
    assert main(["edit_reward_bench", "report", *args]) == 1  # other rows than the file's
    assert "holds results for other inputs" in capsys.readouterr().err
    (out / "judge-pixel.jsonl").unlink()
    assert main(["edit_reward_bench", "all", *args]) == 0
    report = _report(out)
    old = old_erb.run_benchmark(edit_set, [NamedScorer("p", PixelScorer(), "pixel")], tmp_path / "old",
                                progress=False)["p"]  # fmt: skip
    for dim in ("prompt_following", "consistency", "overall"):
        assert report["table"][dim] == pytest.approx(old["mean"]["strict"][dim], abs=1e-12)
        assert report["table"][f"{dim}_non_strict"] == pytest.approx(old["mean"]["non_strict"][dim], abs=1e-12)
    assert report["groups"]["color_alter"]["overall"] == 0.0  # a tie is wrong strictly
    assert report["groups"]["color_alter"]["overall_non_strict"] == 1.0
    assert report["groups"]["[object]"]["consistency"] == pytest.approx(old["groups"]["object"]["strict"]["consistency"])


def test_usage_and_input_errors(rank_set, edit_set, tmp_path, capsys):
    data = str(rank_set["data_dir"])
    for argv in (["consistency_rank", "judge", "--judge", "pixel"],  # no --data
                 ["consistency_rank", "judge", "--data", data, "--judge", "pixel", "--mode", "refrence"],
                 ["edit_reward_bench", "report", "--data", str(edit_set), "--limt", "2"]):  # fmt: skip
        with pytest.raises(SystemExit) as usage:
            main(argv)
        assert usage.value.code == 2, argv
    capsys.readouterr()
    assert main(["consistency_rank", "judge", "--data", data, "--judge", "chat:http://h/v1@m"]) == 1
    assert "give one of paco:<evaluator folder or hub id>" in capsys.readouterr().err
    assert main(["consistency_rank", "judge", "--data", data, "--judge", "pixel:big"]) == 1
    assert "must be a positive integer; got 'big'" in capsys.readouterr().err
    assert main(["consistency_rank", "judge", "--data", str(tmp_path / "nowhere"), "--judge", "pixel"]) == 1
    assert "consistency_full_rank.jsonl" in capsys.readouterr().err
    assert main(["edit_reward_bench", "report", "--data", str(edit_set), "--judge", "pixel",
                 "--output_dir", str(tmp_path / "empty")]) == 1  # fmt: skip
    assert "run `paco-eval edit_reward_bench judge` with the same flags first" in capsys.readouterr().err
