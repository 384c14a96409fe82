"""Stage 1: prompts and layouts from T2IS JSONL."""

from __future__ import annotations

import json

import pytest

from data_pipeline.prompts import load_prompts, prepare_prompts, read_prompts
from data_pipeline.storage import DataPipelineError
from paco_reward.errors import LayoutError, PromptError


def test_real_t2is_prompts(t2is_path, tmp_path):
    out = prepare_prompts(t2is_path, tmp_path, limit=40)
    prompts = read_prompts(tmp_path)
    assert out.name == "prompts.jsonl" and len(prompts) == 40
    first = prompts["0003"]
    assert (first["rows"], first["cols"]) == (2, 2)
    assert len(first["panels"]) == 4 and first["panels"][0].startswith("A woman walks")
    assert first["theme"].startswith("Generate multiple hyper-realistic")
    assert first["category"] == "Character Generation"
    assert set(first["criteria"]) == {"Identity", "Style", "Logic"}
    # Re-running gives the same file (atomic rewrite).
    before = out.read_bytes()
    prepare_prompts(t2is_path, tmp_path, limit=40)
    assert out.read_bytes() == before
    assert len(load_prompts(t2is_path)) == 150


def _write(tmp_path, records):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_layout_from_prompt_and_theme_fallback(tmp_path):
    path = _write(
        tmp_path,
        [{"prompt": "TWO-PANEL Images with a 1x2 grid layout A fox. [LEFT]:a. [RIGHT]:b."}],
    )
    (record,) = load_prompts(path)
    assert record["prompt_id"] == "1" and record["layout"] == "1x2"
    assert record["theme"].endswith("A fox.") and record["panels"] == ["a.", "b."]


@pytest.mark.parametrize(
    "records, error, match",
    [
        ([{"idx": "1"}], PromptError, "no non-empty 'prompt'"),
        ([{"idx": "1", "prompt": "a fox"}], LayoutError, "line 1 .*No grid layout"),
        (
            [{"idx": "1", "prompt": "A. [LEFT]:a. [RIGHT]:b.", "layout": "2x2"}],
            PromptError,
            "needs 4 panel",
        ),
        ([{"idx": "1", "prompt": "x", "layout": "1x2"}] * 2, DataPipelineError, "appears twice"),
    ],
)
def test_prompt_errors(tmp_path, records, error, match):
    with pytest.raises(error, match=match):
        load_prompts(_write(tmp_path, records))


def test_missing_and_bad_json(tmp_path):
    with pytest.raises(DataPipelineError, match="No JSONL file"):
        load_prompts(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n{oops\n')
    with pytest.raises(DataPipelineError, match="bad.jsonl:2: not valid JSON"):
        load_prompts(bad)
