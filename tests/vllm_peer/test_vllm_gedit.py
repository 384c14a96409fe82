"""GEdit-Bench end to end against a real judge: a tiny FLUX.1-Kontext edits fixture rows, the
session's stock vLLM CPU server (a tiny Qwen2.5-VL) answers the VIEScore prompts through
:class:`paco_eval.chat_judge.OpenAIChatJudge`, and a re-run makes no new judge call."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from peer_settings import SERVED_NAME

from paco_eval.chat_judge import OpenAIChatJudge
from paco_eval.gedit.bench import RESULTS_KEY, judge_rows, report_tables
from paco_eval.gedit.data import load_rows, select_rows
from paco_eval.gedit.generate import generate_edits
from paco_eval.gedit.viescore import REFERENCE
from paco_eval.harness import ResultsStore

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "gedit_ref"
KONTEXT_KWARGS = {
    "guidance_scale": 2.5,
    "max_sequence_length": 32,
    "max_area": 16 * 16,
    "_auto_resize": False,
}


@pytest.mark.slow
def test_vllm_judges_tiny_kontext_edits(vllm_server, tmp_path):
    from paco_grpo.testing.flux_kontext import build_tiny_flux_kontext

    rows = select_rows(load_rows(FIXTURE), languages=["en"], groups=["color_alter", "ps_human"])
    kontext = build_tiny_flux_kontext(tmp_path / "kontext", seed=0)
    made = generate_edits(
        rows,
        tmp_path / "results",
        "kontext",
        pipeline="flux_kontext",
        model_name_or_path=str(kontext),
        num_inference_steps=2,
        pipeline_kwargs=KONTEXT_KWARGS,
    )
    assert made["written"] == len(rows) == 4
    judge = OpenAIChatJudge(vllm_server.base_url, SERVED_NAME, max_tokens=24)
    for mode in ("default", REFERENCE):
        store = ResultsStore(tmp_path / f"{mode}.jsonl", fingerprint=mode, key=RESULTS_KEY)
        counts = judge_rows(
            rows, tmp_path / "results", "kontext", judge, store, mode=mode, max_tries=2
        )
        assert counts["scored"] == 4
        sent = judge.requests_sent
        again = judge_rows(rows, tmp_path / "results", "kontext", judge, store, mode=mode)
        assert again["skipped"] == 4 and judge.requests_sent == sent  # no new judge call
        table = report_tables(store.rows(), mode=mode)
        recs = store.rows()
        assert all(r["answers"]["SC"] and r["answers"]["PQ"] for r in recs)  # the model answered
        if mode == "default":  # a tiny random model writes no score JSON: missing, counted
            scored = [r for r in recs if r["reason"] is None]
            assert table["en"]["coverage"]["scored"] == len(scored)
            assert all(0 <= r["sc"] <= 10 and 0 <= r["pq"] <= 10 for r in scored)
        else:  # the released loop guesses deterministically when nothing parses
            for r in recs:
                if r["guessed"] == ["SC", "PQ"]:
                    assert (r["sc"], r["pq"]) == (10, 1)
            assert not math.isnan(table["en"]["fullset"]["micro"]["sc"])
