"""EditReward-Bench end to end on a synthetic set with known answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks import edit_reward_bench as erb
from benchmarks.common import BenchmarkDataError, NamedScorer, slug
from benchmarks.synthetic import make_edit_reward_set
from paco_reward.baselines import PixelScorer

# Pixel scores fall as the colour shift ("delta") grows, so the pixel scorer prefers the
# smaller delta: a comparison is strictly right iff the preferred output's delta is smaller.
ROWS = [
    {"task_type": "subject-add", "dimension": "consistency", "deltas": [10, 80], "keys": ["a0", "a1"], "image": 0},
    {"task_type": "subject-add", "dimension": "prompt_following", "deltas": [10, 80], "keys": ["a0", "a1"], "image": 0},
    {"task_type": "subject-remove", "dimension": "consistency", "deltas": [90, 20]},
    {"task_type": "color_alter", "dimension": "overall", "deltas": [30, 30]},
    {"task_type": "background_change", "dimension": "prompt_following", "deltas": [5, 60]},
    {"task_type": "compose", "dimension": "consistency", "deltas": [40, 10]},
    {"task_type": "style_change", "dimension": "overall", "deltas": [0, 50]},
    {"task_type": "motion_change", "dimension": "consistency", "deltas": [10, 50, 5]},
]  # fmt: skip
GROUPS = {  # written out independently of the module under test
    "object": ["subject-add", "subject-remove", "subject-replace"],
    "appearance": ["color_alter", "material_alter", "style_change", "tone_transfer"],
    "scene": ["background_change", "extract"],
    "advanced": ["ps_human", "text_change", "motion_change", "compose"],
}


class CountingScorer:
    def __init__(self, inner):
        self.inner, self.pairs = inner, 0

    def score_pairs(self, pairs):
        self.pairs += len(pairs)
        return self.inner.score_pairs(pairs)


def expected_accuracies():
    """{strict|non_strict: {dimension: {task: accuracy}}} from the deltas alone."""
    out = {"strict": {}, "non_strict": {}}
    for label, better in (("strict", lambda a, b: a < b), ("non_strict", lambda a, b: a <= b)):
        hits: dict = {}
        for row in ROWS:
            pref, *others = row["deltas"]
            for other in others:
                hits.setdefault(row["dimension"], {}).setdefault(row["task_type"], []).append(
                    better(pref, other)
                )
        out[label] = {d: {t: float(np.mean(v)) for t, v in ts.items()} for d, ts in hits.items()}
    return out


@pytest.fixture(scope="module")
def edit_set(tmp_path_factory):
    return make_edit_reward_set(tmp_path_factory.mktemp("erb") / "bench", ROWS)


def test_pixel_scorer_known_accuracies(edit_set, tmp_path):
    pixel = CountingScorer(PixelScorer())
    out = tmp_path / "out"
    res = erb.run_benchmark(edit_set, [NamedScorer("pixel", pixel, "pixel")], out, progress=False)
    # 2 shared outputs ("a0", "a1" appear in two rows) + 5 rows x 2 + 1 row x 3 = 15.
    assert pixel.pairs == 15
    expected = expected_accuracies()
    summary = res["pixel"]
    for label in ("strict", "non_strict"):
        for dim, tasks in expected[label].items():
            for task, acc in tasks.items():
                assert summary["per_task"][task][dim][label] == pytest.approx(acc), (
                    label,
                    dim,
                    task,
                )
            assert summary["mean"][label][dim] == pytest.approx(np.mean(list(tasks.values())))
            for group, members in GROUPS.items():
                vals = [tasks[t] for t in members if t in tasks]
                got = summary["groups"][group][label][dim]
                assert (math.isnan(got) and not vals) or got == pytest.approx(np.mean(vals))
    # Spot values: the color_alter tie is wrong strictly and right non-strictly.
    assert summary["per_task"]["color_alter"]["overall"]["strict"] == 0.0
    assert summary["per_task"]["color_alter"]["overall"]["non_strict"] == 1.0
    assert summary["per_task"]["motion_change"]["consistency"]["n"] == 2
    assert summary["mean"]["strict"]["consistency"] == pytest.approx((1 + 0 + 0 + 0.5) / 4)
    # Outputs.
    assert "paper: PaCo-Reward-7B" in (out / "summary.txt").read_text()
    assert "0.777" in (out / "summary.md").read_text()
    assert "[appearance]" in (out / "by_task.txt").read_text()
    assert (out / "metrics.png").stat().st_size > 1000
    comparisons = [json.loads(x) for x in (out / "pixel" / "results.jsonl").open()]
    assert len(comparisons) == 9
    # Resume: a second run scores nothing new and gives the same numbers.
    again = CountingScorer(PixelScorer())
    res2 = erb.run_benchmark(edit_set, [NamedScorer("pixel", again, "pixel")], out, progress=False)
    assert again.pairs == 0 and res2 == res


def test_parquet_layout_gives_the_same_numbers(edit_set, tmp_path):
    parquet = make_edit_reward_set(tmp_path / "pq", ROWS, fmt="parquet")
    a = erb.run_benchmark(
        edit_set, [NamedScorer("p", PixelScorer(), "pixel")], tmp_path / "a", progress=False
    )
    b = erb.run_benchmark(
        parquet, [NamedScorer("p", PixelScorer(), "pixel")], tmp_path / "b", progress=False
    )
    assert a == b


def test_cli_with_tiny_paco_and_clip(
    edit_set, tmp_path, tiny_model_dir, tiny_reward, tiny_clip_dir, capsys
):
    out = tmp_path / "out"
    rc = erb.main(
        ["--data", str(edit_set), "--scorer", f"tiny=paco:{tiny_model_dir}",
         "--scorer", f"clip:{tiny_clip_dir}", "--output-dir", str(out), "--no-progress"]
    )  # fmt: skip
    assert rc == 0
    printed = capsys.readouterr().out
    assert "tiny" in printed and "0.751" in printed
    ds = erb.load_edit_reward_bench(edit_set)
    cache = {r["key"]: r for r in map(json.loads, (out / "tiny" / "scores.jsonl").open())}
    row = ds[2]
    for pos in (0, 1):
        direct = tiny_reward.score_edit(
            row["input_image"], row["output_images"][pos], row["instruction"]
        )
        cached = cache[row["key"][pos]]
        assert cached["consistency"] == pytest.approx(direct.consistency, abs=1e-6)
        assert cached["prompt_following"] == pytest.approx(direct.prompt_following, abs=1e-6)
        assert cached["overall"] == pytest.approx(direct.overall, abs=1e-6)
    summary = json.loads((out / "summary.json").read_text())["methods"]
    for method in ("tiny", "CLIP-I (clip)"):
        cache = {r["key"]: r for r in map(json.loads, (out / slug(method) / "scores.jsonl").open())}
        per_task: dict = {}
        for r in ds.select_columns(["key", "task_type", "dimension"]):
            first, *others = r["key"]
            for other in others:
                per_task.setdefault((r["task_type"], r["dimension"]), []).append(
                    cache[first][r["dimension"]] > cache[other][r["dimension"]]
                )
        for (task, dim), hits in per_task.items():
            assert summary[method]["per_task"][task][dim]["strict"] == pytest.approx(np.mean(hits))
    # Image-only scorers use their one similarity for every dimension.
    clip_cache = [json.loads(x) for x in (out / slug("CLIP-I (clip)") / "scores.jsonl").open()]
    assert all(r["consistency"] == r["prompt_following"] == r["overall"] for r in clip_cache)


def test_invalid_data_is_reported(tmp_path, capsys):
    with pytest.raises(BenchmarkDataError, match="No dataset at"):
        erb.load_edit_reward_bench(tmp_path / "missing")
    assert erb.main(["--data", str(tmp_path / "missing"), "--scorer", "pixel"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("python -m benchmarks.edit_reward_bench: error: No dataset at")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    import datasets

    ds = datasets.Dataset.from_dict({"key": [["a", "b"]], "instruction": ["x"]})
    ds.save_to_disk(str(tmp_path / "partial"))
    with pytest.raises(BenchmarkDataError, match=r"missing column\(s\) \['dimension'"):
        erb.load_edit_reward_bench(tmp_path / "partial")
    bad = make_edit_reward_set(
        tmp_path / "bad", [{"task_type": "compose", "dimension": "quality", "deltas": [1, 2]}]
    )
    with pytest.raises(BenchmarkDataError, match="dimension 'quality' is not one of"):
        erb.run_benchmark(bad, [NamedScorer("p", PixelScorer(), "pixel")], tmp_path / "o")


def test_task_groups_cover_the_13_editscore_types():
    assert len(erb.EDIT_TASK_TYPES) == len(set(erb.EDIT_TASK_TYPES)) == 13
    assert {k: list(v) for k, v in erb.EDIT_TASK_GROUPS.items()} == GROUPS
