"""ConsistencyRank end to end on a synthetic set with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks import consistency_rank as cr
from benchmarks.common import BenchmarkDataError, NamedScorer
from benchmarks.synthetic import make_consistency_rank_set
from paco_reward.baselines import PixelScorer
from paco_reward.metrics import RANKING_METRICS

# Human orders as delta indices (0 = the unchanged copy of the reference), best first.
HUMAN = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 0, 2, 3], [0, 2, 3, 1], [2, 0, 3, 1]]
CATEGORIES = ["character", "style", "character", "style", "character"]


class CountingScorer:
    """Forwards to a real scorer and counts the pairs it was asked to score."""

    def __init__(self, inner):
        self.inner, self.pairs = inner, 0

    def score_pairs(self, pairs):
        self.pairs += len(pairs)
        return self.inner.score_pairs(pairs)


@pytest.fixture
def dataset(tmp_path):
    return make_consistency_rank_set(tmp_path / "cr", HUMAN, categories=CATEGORIES, seed=1)


def expected_metrics(items, scipy_metrics, orders=None):
    per_item = [
        scipy_metrics(orders[k] if orders else it["pixel_order"], it["human_order"])
        for k, it in enumerate(items)
    ]
    return {m: float(np.mean([p[m] for p in per_item])) for m in RANKING_METRICS}


def test_loader_reads_official_layout_and_aliases(dataset):
    items = cr.load_consistency_rank(dataset["data_dir"])
    assert [it.human_order for it in items] == [it["human_order"] for it in dataset["items"]]
    assert items[1].category == "style" and items[0].prompt == "a circle in flat colour"
    # The released aliases ref_img / comparison_images.
    path = dataset["data_dir"] / "consistency_full_rank.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    for line in lines:
        line["ref_img"], line["comparison_images"] = line.pop("ref_image"), line.pop("comp_images")
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    again = cr.load_consistency_rank(dataset["data_dir"])
    assert [it.key for it in again] == [it.key for it in items]


def test_pixel_scorer_metrics_match_scipy(dataset, tmp_path, scipy_metrics):
    pixel = CountingScorer(PixelScorer())
    out = tmp_path / "out"
    results = cr.run_benchmark(
        dataset["data_dir"],
        [NamedScorer("pixel", pixel, "pixel")],
        out,
        items_per_batch=2,
        progress=False,
    )
    assert pixel.pairs == 4 * len(HUMAN)
    records = [json.loads(x) for x in (out / "pixel" / "results.jsonl").read_text().splitlines()]
    for rec, item in zip(records, dataset["items"]):  # the pixel order is known by construction
        assert rec["pred_rank"] == [item["comp_images"][i] for i in item["pixel_order"]]
    overall = results["pixel"]["overall"]
    expected = expected_metrics(dataset["items"], scipy_metrics)
    for name in RANKING_METRICS:
        assert overall[name] == pytest.approx(expected[name]), name
    assert overall["n_items"] == 5 and overall["n_skipped"] == 0
    # The shuffled candidate order makes the released definitions differ here.
    assert overall["kendall_tau"] == pytest.approx(0.2)
    assert overall["kendall_tau_ref"] == pytest.approx(-1 / 15)
    for category in ("character", "style"):
        members = [it for it in dataset["items"] if it["category"] == category]
        exp = expected_metrics(members, scipy_metrics)
        got = results["pixel"]["by_category"][category]
        assert got["n_items"] == len(members)
        for name in RANKING_METRICS:
            assert got[name] == pytest.approx(exp[name]), (category, name)
    # Outputs a person reads.
    txt = (out / "summary.txt").read_text()
    assert "paper: PaCo-Reward-7B" in txt and "0.449" in txt and "0.557" in txt
    assert "\\begin{tabular}" in (out / "summary.tex").read_text()
    assert (out / "summary.md").read_text().startswith("| method |")
    assert "style" in (out / "by_category.md").read_text()
    assert Image.open(out / "metrics.png").size[0] > 100
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["pixel"]["overall"]["accuracy"] == pytest.approx(expected["accuracy"])


def test_resume_skips_finished_items_and_survives_a_torn_line(dataset, tmp_path):
    out = tmp_path / "out"
    first = cr.run_benchmark(
        dataset["data_dir"], [NamedScorer("pixel", PixelScorer(), "pixel")], out, progress=False
    )
    again = CountingScorer(PixelScorer())
    second = cr.run_benchmark(
        dataset["data_dir"], [NamedScorer("pixel", again, "pixel")], out, progress=False
    )
    assert again.pairs == 0 and second == first
    results = out / "pixel" / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:-1]) + lines[-1][:25])  # interrupted mid-write
    third_scorer = CountingScorer(PixelScorer())
    third = cr.run_benchmark(
        dataset["data_dir"], [NamedScorer("pixel", third_scorer, "pixel")], out, progress=False
    )
    assert third_scorer.pairs == 4 and third == first


def test_nan_scores_are_recorded_and_skipped(dataset, tmp_path):
    class NanOnFirstItem:
        def score_pairs(self, pairs):
            scores = PixelScorer().score_pairs(pairs)
            scores[:4] = np.nan
            return scores

    out = tmp_path / "out"
    res = cr.run_benchmark(
        dataset["data_dir"], [NamedScorer("nan", NanOnFirstItem(), "x")], out, progress=False
    )
    assert res["nan"]["overall"]["n_skipped"] == 1 and res["nan"]["overall"]["n_items"] == 4
    first = json.loads((out / "nan" / "results.jsonl").read_text().splitlines()[0])
    assert first["scores"] == [None] * 4 and first["metrics"] is None


def test_cli_with_tiny_paco_clip_and_pixel(
    dataset, tmp_path, tiny_model_dir, tiny_reward, tiny_clip_dir, scipy_metrics, capsys
):
    out = tmp_path / "out"
    rc = cr.main(
        [
            "--data-dir", str(dataset["data_dir"]),
            "--scorer", f"tiny=paco:{tiny_model_dir}",
            "--scorer", f"clip:{tiny_clip_dir}",
            "--scorer", "pixel",
            "--output-dir", str(out),
            "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr().out
    assert "tiny" in printed and "paper: DreamSim" in printed and "0.403" in printed
    summary = json.loads((out / "summary.json").read_text())["methods"]
    for method in ("tiny", "CLIP-I (clip)"):
        records = [json.loads(x) for x in (out / cr.slug(method) / "results.jsonl").open()]
        orders = [[r["comp_images"].index(c) for c in r["pred_rank"]] for r in records]
        for r, order in zip(records, orders):
            assert np.all(np.diff(np.asarray(r["scores"])[order]) <= 0)  # pred_rank sorts scores
        expected = expected_metrics(dataset["items"], scipy_metrics, orders)
        for name in RANKING_METRICS:
            assert summary[method]["overall"][name] == pytest.approx(expected[name]), (method, name)
    # The evaluator is scored with the "rank" template, as PacoReward.score_pairs does.
    first = [json.loads(x) for x in (out / "tiny" / "results.jsonl").open()][0]
    folder = dataset["data_dir"] / "images" / first["folder"]
    direct = tiny_reward.score_pairs(
        [(folder / first["ref_image"], folder / c) for c in first["comp_images"]], template="rank"
    )
    np.testing.assert_allclose(first["scores"], direct, rtol=1e-5, atol=1e-6)
    # CLIP-I puts the unchanged copy of the reference first in every item.
    clip_records = [
        json.loads(x) for x in (out / cr.slug("CLIP-I (clip)") / "results.jsonl").open()
    ]
    for r, item in zip(clip_records, dataset["items"]):
        assert r["pred_rank"][0] == item["comp_images"][item["pixel_order"][0]]


def test_invalid_data_is_reported(dataset, tmp_path, capsys):
    with pytest.raises(BenchmarkDataError, match="consistency_full_rank.jsonl"):
        cr.load_consistency_rank(tmp_path / "nowhere")
    assert cr.main(["--data-dir", str(tmp_path / "nowhere"), "--scorer", "pixel"]) == 1
    assert "consistency_full_rank.jsonl" in capsys.readouterr().err
    path = dataset["data_dir"] / "consistency_full_rank.jsonl"
    good = path.read_text()
    line = json.loads(good.splitlines()[0])
    line["rank_images"] = line["rank_images"][:3] + ["nope.png"]
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(BenchmarkDataError, match="exactly once"):
        cr.load_consistency_rank(dataset["data_dir"])
    path.write_text(json.dumps({"folder": "0000", "comp_images": ["a"]}) + "\n")
    with pytest.raises(BenchmarkDataError, match="needs 'folder', 'ref_image'"):
        cr.load_consistency_rank(dataset["data_dir"])
    path.write_text(good)
    (dataset["data_dir"] / "images" / "0000" / "0_0.png").unlink()
    with pytest.raises(BenchmarkDataError, match="0_0.png does not exist"):
        cr.load_consistency_rank(dataset["data_dir"])
    with pytest.raises(ValueError, match="not a tie rule"):
        cr.run_benchmark(dataset["data_dir"], [], tmp_path, ties="middle")


def test_exit_codes_and_one_line_errors(dataset, tmp_path, capsys):
    """0 done, 1 an error (one line naming the input, no traceback), 2 a usage error."""
    data = str(dataset["data_dir"])
    argv = ["--data_dir", data, "--scorer", "pixel", "--output-dir", str(tmp_path / "out")]
    assert cr.main([*argv, "--no-progress"]) == 0
    assert "Pixel L1" in capsys.readouterr().out
    prog = "python -m benchmarks.consistency_rank: error: "
    errors = [
        (["--data-dir", str(tmp_path / "nowhere"), "--scorer", "pixel"], "nowhere"),
        (["--data-dir", data, "--scorer", "pixle"], "Unknown scorer 'pixle'"),
        ([*argv, "--ties", "middle"], "ties must be one of ['first', 'last']; got 'middle'"),
        (["--data-dir", data, "--scorer", f"paco:{tmp_path / 'no-model'}"], "no-model"),
    ]
    for args, part in errors:
        assert cr.main(args) == 1, args
        err = capsys.readouterr().err
        assert "Traceback" not in err
        (line,) = err.strip().splitlines()
        assert line.startswith(prog) and part in line, line
    for args in (["--data-dir", data], [*argv, "--limt", "2"], [*argv, "--limit", "two"]):
        with pytest.raises(SystemExit) as usage:
            cr.main(args)
        assert usage.value.code == 2, args
        assert "usage: python -m benchmarks.consistency_rank" in capsys.readouterr().err


def test_resume_refuses_results_of_another_scorer(dataset, tmp_path):
    out = tmp_path / "out"
    cr.run_benchmark(
        dataset["data_dir"], [NamedScorer("m", PixelScorer(), "pixel")], out, progress=False
    )
    other = NamedScorer("m", PixelScorer(16), "pixel:16")
    with pytest.raises(BenchmarkDataError, match="resuming would mix"):
        cr.run_benchmark(dataset["data_dir"], [other], out, progress=False)


def test_duplicate_scorer_names_are_rejected(dataset, tmp_path):
    scorers = [NamedScorer("x", PixelScorer(), "pixel"), NamedScorer("x", PixelScorer(), "pixel")]
    with pytest.raises(ValueError, match="names must be unique"):
        cr.run_benchmark(dataset["data_dir"], scorers, tmp_path / "o", progress=False)


@pytest.mark.slow
def test_runs_as_a_module_of_the_installed_package(built_wheel, dataset, tmp_path, scipy_metrics):
    """``python -m benchmarks.consistency_rank`` run from a folder that is not the repository,
    against the wheel installed in a folder of its own: the library it imports is the
    installed one, and of the checkout it needs only the ``benchmarks`` folder (no demo, no
    tests, no recipes)."""
    import os
    import shutil
    import subprocess
    import sys

    from tests.conftest import DISTRIBUTED, ROOT

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
         "--target", str(site), str(built_wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    checkout = tmp_path / "checkout"  # the benchmarks folder alone, as a checkout has it
    shutil.copytree(ROOT / "benchmarks", checkout / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(checkout)])

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True
        )

    where = python(
        "-c", f"import importlib.util as u; print(*(u.find_spec(p).origin for p in {DISTRIBUTED}))"
    )
    assert where.returncode == 0, where.stderr
    assert all(Path(p).is_relative_to(site) for p in where.stdout.split()), where.stdout
    done = python("-m", "benchmarks.consistency_rank", "--data_dir", str(dataset["data_dir"]),
                  "--scorer", "pixel", "--output_dir", "out", "--no_progress")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Outputs in out/" in done.stdout
    summary = json.loads((cwd / "out" / "summary.json").read_text())["methods"]["Pixel L1"]
    expected = expected_metrics(dataset["items"], scipy_metrics)
    for name in RANKING_METRICS:
        assert summary["overall"][name] == pytest.approx(expected[name]), name
    usage = python("-m", "benchmarks.consistency_rank", "--scorer", "pixel")
    assert usage.returncode == 2 and "--data_dir" in usage.stderr
