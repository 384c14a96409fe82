"""benchmarks.annotate_load at a small scale: it serves the folder it builds, times every
request it says it times, and its progress counts what was stored."""

from __future__ import annotations

import json

from benchmarks.annotate_load import main


def test_annotate_load_small(tmp_path, capsys):
    output = tmp_path / "results.json"
    argv = ["--rankings", "100", "--team", "4", "--submits", "5", "--progress_calls", "3"]
    assert main([*argv, "--output", str(output)]) == 0
    results = json.loads(output.read_text())
    # One prompt: 48 instances, each ranked by 3 of the 4 annotators.
    assert (results["rankings"], results["instances"]) == (144, 48)
    assert results["progress"]["requests"] == 3
    assert results["submit_alone"]["requests"] == results["submit_while_polled"]["requests"] == 5
    assert results["progress_while_submitting"]["requests"] >= 1
    for key in ("progress", "submit_alone", "submit_while_polled"):
        assert 0 < results[key]["p50_ms"] <= results[key]["p95_ms"]
    assert "POST /api/rankings, progress polled" in capsys.readouterr().out
