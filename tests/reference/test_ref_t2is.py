"""``paco-eval t2is`` against the released T2IS-Bench evaluation code on the same inputs.

Reference: ``T2IS_Eval/test_prompt_consistency.py`` and ``T2IS_Eval/vqa_alignment.py`` of
github.com/chengyou-jia/T2IS at commit a40b858. The live test runs them from a checkout
that ``PACO_REF_T2IS`` names (``git clone https://github.com/chengyou-jia/T2IS``: a work tree
or its git directory; the files are read at :data:`COMMIT`), kept outside this repository and
skipped without it. Its code is run as released, with the run-time patches of
:mod:`benchmarks.t2is_speed` that touch no arithmetic (the tiny judge's Yes/No ids for the
hard-coded 2753 / 9454, the model path linked in a temporary working folder, ``cuda`` kept on
the CPU without a GPU).
``t2v_metrics`` is replaced on both sides by the same deterministic stub (a hash of the
image's pixels and the text), so the alignment arithmetic, naming and skipping are compared
without the 11B model (CLIP-FlanT5 itself is compared with t2v-metrics in
``test_ref_vqascore.py``).

Fixture (``tests/eval/t2is_fixture.py``): cases with 2 to 8 images, an absent dimension, a
case without criteria, a case without images, a missing image, and a file that is not a
sub-image. The judge is a tiny random Qwen2.5-VL in float32 whose pixel budget holds the
released 504 x 504 resize, so neither side's processor resizes again.

The live run's numbers are frozen in :data:`FROZEN`; :func:`test_frozen_reference_numbers`
checks this harness against them in every ``make test``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from benchmarks.t2is_speed import (
    ALIGNMENT_SCRIPT,
    build_judge,
    released_module,
    released_source,
    run_released_consistency,
)
from paco_eval.t2is import stages
from paco_eval.t2is.benchmark import T2ISConfig
from paco_eval.testing import write_tiny_t2is_bench

# Printed by test_released_code_equals_reference_mode (T2IS @ a40b858; torch 2.14.1,
# transformers 5.23.0): the released script's per-case dimension averages and finals on the
# fixture, and the released alignment's pooled means.
FROZEN: dict = {
    "case_dimension_averages": {
        "0001_0001": {"Style": 0.0010338738087133, "Identity": 0.009606872713144792, "Logic": 0.000670771740260534},
        "0002_0001": {"Style": 0.0009691423620097339, "Identity": 0.0037979830522090197, "Logic": 0.08158078044652939},
        "0006_0001": {"Style": 0.04630456864833832, "Identity": 0.002380731515586376, "Logic": 0.0},
        "0021_0001": {"Style": 0.0509932493038962, "Identity": 0.0, "Logic": 0.1427804376022063},
    },
    "final_dimension_averages": {
        "Style": 0.024825208530739388, "Identity": 0.005261862426980062, "Logic": 0.07501066326299874,
    },
    "alignment_pooled": {"Entity": 0.471, "Attribute": 0.4485, "Relation": 0.5072},
}  # fmt: skip


def _stub_score(image, text: str) -> float:
    """The same deterministic 'VQAScore' on both sides: a hash of pixels and text in [0, 1]."""
    from PIL import Image

    pixels = Image.open(image).convert("RGB") if isinstance(image, (str, os.PathLike)) else image
    digest = hashlib.sha256(pixels.tobytes() + text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class StubVQAScore:
    """t2v_metrics.VQAScore's call (``images=[path], texts=[...]`` -> 1 x n tensor) and the
    harness's scorer protocol (``score(images, texts)``)."""

    def __init__(self, model: str = "") -> None:
        self.model = model

    def __call__(self, images, texts):
        return torch.tensor([[_stub_score(images[0], t) for t in texts]], dtype=torch.float64)

    def score(self, images, texts):
        return [[_stub_score(image, t) for t in group] for image, group in zip(images, texts)]


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    """A tiny float32 Qwen2.5-VL whose pixel budget holds 504 x 504 (the released resize)."""
    return build_judge(tmp_path_factory.mktemp("t2is-judge") / "model", seed=3, max_pixels=504 * 504)


@pytest.fixture(scope="module")
def fixture_dirs(tmp_path_factory):
    return write_tiny_t2is_bench(tmp_path_factory.mktemp("t2is-ref"))


def run_harness(bench: Path, images: Path, out: Path, judge: Path, mode: str, monkeypatch,
                alignment: str = "stub", batch_size: int = 1) -> dict:  # fmt: skip
    """Our judge + report stages in ``mode`` with the stub alignment scorer; report.json."""
    monkeypatch.setattr(stages, "_load_alignment", lambda *a: StubVQAScore())
    config = T2ISConfig(data=str(bench), images_dir=str(images), output_dir=str(out), mode=mode,
                        consistency_judges=[f"qwen={judge}"], alignment=alignment, aesthetics="",
                        batch_size=batch_size)  # fmt: skip
    assert stages.run_judge(config) == 0 and stages.run_report(config) == 0
    return json.loads((out / "report.json").read_text())


def ours_per_case(out: Path) -> dict[str, dict[str, float]]:
    from paco_eval.t2is.report import case_consistency

    rows = [json.loads(line) for line in (out / "consistency-qwen.jsonl").read_text().splitlines()[1:]]
    return {r["key"]: case_consistency(r, "reference") for r in rows}


def ours_alignment(out: Path) -> dict[str, dict[str, float]]:
    rows = [json.loads(line) for line in (out / "alignment.jsonl").read_text().splitlines()[1:]]
    return {r["key"]: r["scores"] for r in rows}


def test_frozen_reference_numbers(fixture_dirs, judge_dir, tmp_path, monkeypatch):
    if not FROZEN:
        pytest.skip("no frozen numbers yet: run the live test with PACO_REF_T2IS")
    bench, images = fixture_dirs
    report = run_harness(bench, images, tmp_path / "ref", judge_dir, "reference", monkeypatch)
    for case, dims in FROZEN["case_dimension_averages"].items():
        for dim, value in dims.items():
            assert ours_per_case(tmp_path / "ref")[case][dim] == pytest.approx(value, abs=1e-6), (case, dim)
    table = report["table"]
    for dim, value in FROZEN["final_dimension_averages"].items():
        assert table[f"VC-{dim}"] == pytest.approx(value, abs=1e-6)
    for dim, value in FROZEN["alignment_pooled"].items():
        assert table[f"PA-{dim}"] == pytest.approx(value, abs=5e-5)  # printed at 4 decimals


# ---------------------------------------------------------------------- live
@pytest.mark.skipif(not os.environ.get("PACO_REF_T2IS"), reason="set PACO_REF_T2IS to a T2IS checkout")
def test_released_code_equals_reference_mode(fixture_dirs, judge_dir, tmp_path, monkeypatch):
    checkout = Path(os.environ["PACO_REF_T2IS"]).expanduser()
    bench, images = fixture_dirs
    start = time.perf_counter()
    theirs = run_released_consistency(checkout, bench, images, judge_dir, tmp_path / "cwd")
    released_s = time.perf_counter() - start
    monkeypatch.setitem(sys.modules, "t2v_metrics", types.SimpleNamespace(VQAScore=StubVQAScore))
    alignment = released_module(released_source(checkout, ALIGNMENT_SCRIPT), "vqa_alignment")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        alignment.main_evaluation(str(images), "png", str(bench / "prompt_alignment.json"),
                                  str(tmp_path / "theirs_alignment.json"), start_idx=0)  # fmt: skip
    pooled = {m.group(1): float(m.group(2))
              for m in re.finditer(r"^(Entity|Attribute|Relation): ([0-9.]+)$", printed.getvalue().split(
                  "Overall average dimension scores:")[1], re.M)}  # fmt: skip

    report = run_harness(bench, images, tmp_path / "ref", judge_dir, "reference", monkeypatch)
    # the consistency stage alone, as a user runs it (model load included on both sides)
    start = time.perf_counter()
    run_harness(bench, images, tmp_path / "speed", judge_dir, "reference", monkeypatch, alignment="", batch_size=8)
    ours_s = time.perf_counter() - start
    default = run_harness(bench, images, tmp_path / "default", judge_dir, "default", monkeypatch)

    # consistency: per case, per dimension, and the finals
    per_case = ours_per_case(tmp_path / "ref")
    assert set(per_case) == set(theirs["case_results"])
    for case, result in theirs["case_results"].items():
        for dim, value in result["dimension_averages"].items():
            assert per_case[case][dim] == pytest.approx(value, abs=1e-6), (case, dim)
    for dim, value in theirs["final_dimension_averages"].items():
        assert report["table"][f"VC-{dim}"] == pytest.approx(value, abs=1e-6)
    # the default mode differs only where the quirk is: an absent dimension is None, not 0.0
    from paco_eval.t2is.report import case_consistency

    rows = [json.loads(x) for x in (tmp_path / "default" / "consistency-qwen.jsonl").read_text().splitlines()[1:]]
    for row in rows:
        ref_values, new_values = per_case[row["key"]], case_consistency(row, "default")
        for dim in ref_values:
            if new_values[dim] is None:
                assert ref_values[dim] == 0.0
            else:
                assert new_values[dim] == pytest.approx(ref_values[dim], abs=1e-6)
    for dim in theirs["final_dimension_averages"]:
        assert default["table"][f"VC-{dim}"] == pytest.approx(report["table"][f"VC-{dim}"], abs=1e-9)
    # alignment: per image, and the pooled means the released script prints
    released_alignment = json.loads((tmp_path / "theirs_alignment.json").read_text())
    ours = ours_alignment(tmp_path / "ref")
    assert set(ours) == set(released_alignment)
    for key, dims in released_alignment.items():
        assert ours[key] == pytest.approx(dims, abs=1e-9), key
    for dim, value in pooled.items():
        assert report["table"][f"PA-{dim}"] == pytest.approx(value, abs=5e-5)

    frozen = {
        "case_dimension_averages": {c: r["dimension_averages"] for c, r in theirs["case_results"].items()},
        "final_dimension_averages": theirs["final_dimension_averages"],
        "alignment_pooled": pooled,
    }
    print("\nFROZEN =", json.dumps(frozen, indent=1))
    print(f"consistency stage: released {released_s:.2f} s, paco-eval {ours_s:.2f} s "
          f"({released_s / ours_s:.1f}x; python -m benchmarks.t2is_speed compares them best of 3)")  # fmt: skip
