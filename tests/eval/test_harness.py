"""The shared harness: results store (resume, torn rows, stale files), modes, report writer."""

from __future__ import annotations

import json

import pytest

from paco_eval.cli import main
from paco_eval.errors import BenchmarkNotFoundError, StaleResultsError
from paco_eval.harness import (
    Report,
    ResultsStore,
    check_mode,
    file_fingerprint,
    fingerprint,
    write_report,
)
from paco_eval.registry import get_benchmark
from paco_reward.errors import ConfigError, PacoError


def test_store_resumes_and_refuses_another_runs_file(tmp_path):
    path = tmp_path / "judge.jsonl"
    store = ResultsStore(path, fingerprint=fingerprint({"images": "a"}), header={"judge": "j"})
    store.append([{"key": "c1", "v": 0.25}, {"key": "c2", "v": 0.5}])
    again = ResultsStore(path, fingerprint=fingerprint({"images": "a"}))
    assert again.done_keys() == {"c1", "c2"} and again.get("c2")["v"] == 0.5
    assert again.header["judge"] == "j"
    with pytest.raises(StaleResultsError, match="other inputs") as info:
        ResultsStore(path, fingerprint=fingerprint({"images": "b"}))
    assert isinstance(info.value, PacoError) and info.value.path == str(path)


def test_store_drops_a_torn_last_row(tmp_path):
    path = tmp_path / "judge.jsonl"
    ResultsStore(path, fingerprint="f").append({"key": "c1", "v": 1})
    with open(path, "a") as handle:  # what a kill in the middle of a write leaves
        handle.write('{"key": "c2", "v"')
    store = ResultsStore(path, fingerprint="f")
    assert store.done_keys() == {"c1"}
    store.append({"key": "c2", "v": 2})
    assert [json.loads(line).get("key") for line in path.read_text().splitlines()[1:]] == ["c1", "c2"]


def test_store_refuses_a_file_without_header(tmp_path):
    path = tmp_path / "judge.jsonl"
    path.write_text('{"key": "c1"}\n')
    with pytest.raises(StaleResultsError, match="not a paco-eval results file"):
        ResultsStore(path, fingerprint="f")


def test_file_fingerprint_sees_contents(tmp_path):
    a = tmp_path / "a.png"
    a.write_bytes(b"1")
    first = file_fingerprint([a])
    a.write_bytes(b"2")
    assert file_fingerprint([a]) != first
    assert file_fingerprint([tmp_path / "missing.png"]) != file_fingerprint([a])


def test_mode_and_unknown_benchmark():
    assert check_mode("reference") == "reference"
    with pytest.raises(ConfigError, match="mode must be one of"):
        check_mode("paper")
    with pytest.raises(BenchmarkNotFoundError, match="known benchmarks"):
        get_benchmark("nope")
    assert main(["nope", "judge"]) == 2
    assert main(["--help"]) == 0


def test_report_writes_json_and_markdown(tmp_path):
    report = Report("toy", "reference", ["A", "B"], {"A": 0.5, "B": None},
                    groups={"g": {"A": 0.25, "B": None}}, items={"c1": {"A": 0.5}},
                    coverage={"cases": 1}, protocol={"judge": "j"}, paper_rows={"paper": {"A": 0.6, "B": 0.1}},
                    notes=["B is not the paper's model"])  # fmt: skip
    json_path, md_path = write_report(report, tmp_path)
    assert json.loads(json_path.read_text())["table"] == {"A": 0.5, "B": None}
    text = md_path.read_text()
    assert "| this run | 0.5000 | — |" in text and "| paper | 0.6000 | 0.1000 |" in text
    assert "B is not the paper's model" in text and "## Coverage" in text and "| c1 | 0.5000 |" in text
