"""GEdit-Bench stages on the fixture: bad input, a judge that answers nothing, a judge endpoint
that is down (typed error naming the URL, nothing scored lost, resumable), the prompts' bytes."""

from __future__ import annotations

import ast
import math
import os
import shutil
from pathlib import Path

import pytest

from paco_eval.chat_judge import JudgeUnavailableError, OpenAIChatJudge
from paco_eval.gedit import prompts
from paco_eval.gedit.bench import RESULTS_KEY, judge_rows, report_tables
from paco_eval.gedit.data import load_rows, normalize_language, paco_heldout_indices, select_rows
from paco_eval.gedit.viescore import REFERENCE, ScoreParseError, parse_scores, score_item
from paco_eval.harness import ResultsStore
from paco_reward.errors import InputError, InvalidImageError, PacoError
from paco_reward.server.runner import free_port
from tests.paco_eval.conftest import GEDIT_FIXTURE, CannedJudge


def new_store(folder: Path, name: str = "judge.jsonl") -> ResultsStore:
    """The harness's results store, keyed as the GEdit-Bench stages key it."""
    return ResultsStore(folder / name, fingerprint="test", key=RESULTS_KEY)


def stored_lines(store: ResultsStore) -> list[str]:
    """The item of every row line of the store's file (a key twice would show twice)."""
    import json

    lines = store.path.read_text().splitlines()[1:]
    return [json.loads(line)[RESULTS_KEY] for line in lines]


@pytest.fixture
def results(tmp_path):
    return Path(shutil.copytree(GEDIT_FIXTURE / "results", tmp_path / "results"))


def test_prompts_pinned():
    assert prompts.prompt_sha256(prompts.SC_PROMPT) == prompts.SC_PROMPT_SHA256
    assert prompts.prompt_sha256(prompts.PQ_PROMPT) == prompts.PQ_PROMPT_SHA256
    assert "From scale 0 to 10: \n" in prompts.SC_PROMPT  # the trailing space is kept


@pytest.mark.skipif(
    not os.environ.get("PACO_REF_STEP1X"), reason="PACO_REF_STEP1X names no checkout"
)
def test_prompts_equal_the_released_file():
    root = Path(os.environ["PACO_REF_STEP1X"])
    source = (root / "GEdit-Bench" / "viescore" / "vie_prompts.py").read_text()
    values = {
        node.targets[0].id: node.value.value
        for node in ast.parse(source).body
        if isinstance(node, ast.Assign)
    }
    sc = "\n".join(
        [
            values["_context_no_delimit"],
            values["_prompts_0shot_two_image_edit_rule"],
            values["_prompts_0shot_tie_rule_SC"],
        ]
    )
    pq = "\n".join([values["_context_no_delimit"], values["_prompts_0shot_rule_PQ"]])
    assert (sc, pq) == (prompts.SC_PROMPT, prompts.PQ_PROMPT)


def test_parse_scores_validates():
    assert parse_scores('{"score": [0, 10]}') == [0, 10]
    assert parse_scores("[3, 4]") == [3, 4]
    for bad, why in [
        ("", "nothing"),
        ("[11, 3]", "out of 0-10"),
        ('{"score": [7.5, 8]}', "not an integer"),
        ('{"score": ["7", "8"]}', "not a number"),
        ('{"score": [6]}', "expected 2"),
        ("no json", "no score JSON"),
        ('{"reasoning": "x"}', "no score JSON"),
        ('{"score": null}', "not a number"),
    ]:
        with pytest.raises(ScoreParseError, match=why):
            parse_scores(bad)


def test_judge_answering_nothing():
    from PIL import Image

    src, edit = Image.new("RGB", (8, 8)), Image.new("RGB", (8, 8), (9, 9, 9))
    calls = []

    def silent(images, text):
        calls.append(text)
        return ""

    out = score_item(silent, src, edit, "do it", max_tries=2)
    assert math.isnan(out.sc) and "answered nothing" in out.reason and out.calls == 4
    # the released loop guesses: SC 10, PQ 1 under its seeding
    ref = score_item(silent, src, edit, "do it", mode=REFERENCE)
    assert (ref.sc, ref.pq, ref.guessed) == (10, 1, ["SC", "PQ"])


def test_bad_input(results, tmp_path):
    rows = load_rows(GEDIT_FIXTURE)
    with pytest.raises(InputError, match="Unknown GEdit-Bench language 'fr'"):
        normalize_language("fr")
    with pytest.raises(InputError, match="Unknown GEdit-Bench task_type 'recolor'"):
        select_rows(rows, groups=["recolor"])
    with pytest.raises(InputError, match="subset"):
        select_rows(rows, subset="heldout")
    with pytest.raises(InputError, match="draws 128"):
        select_rows(rows, subset="paco_heldout")  # 44 rows: not the full split
    assert select_rows(rows, languages=["zh"]) == select_rows(rows, languages=["cn"])
    # a corrupt edit: typed, naming the file
    row = select_rows(rows, languages=["en"], groups=["color_alter"])[0]
    bad = results / "tiny" / "fullset" / "color_alter" / "en" / f"{row.key}.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(InvalidImageError, match=row.key):
        judge_rows([row], results, "tiny", CannedJudge(rows, GEDIT_FIXTURE / "results"),
                   new_store(tmp_path))  # fmt: skip
    with pytest.raises(InputError, match="keyed by 'item'"):  # en and cn share a key
        judge_rows([row], results, "tiny", CannedJudge(rows, GEDIT_FIXTURE / "results"),
                   ResultsStore(tmp_path / "by-key.jsonl", fingerprint="test"))  # fmt: skip


def test_missing_edit_is_counted_not_scored(results, tmp_path):
    rows = select_rows(load_rows(GEDIT_FIXTURE), languages=["en"], groups=["subject-remove"])
    store = new_store(tmp_path)
    counts = judge_rows(rows, results, "tiny", CannedJudge(rows, results), store)
    assert counts == {"scored": 1, "missing_edit": 1, "skipped": 0}
    table = report_tables(store.rows())
    assert table["en"]["coverage"] == {"items": 2, "scored": 0, "missing": 2}  # 2nd: negative score
    assert any("no edit at" in why for why in table["missing"].values())


def test_endpoint_down_keeps_what_was_scored_and_resumes(results, tmp_path):
    rows = select_rows(
        load_rows(GEDIT_FIXTURE), languages=["cn"], groups=["color_alter", "ps_human"]
    )
    canned = CannedJudge(rows, results)
    url = f"http://127.0.0.1:{free_port()}/v1"
    down = OpenAIChatJudge(url, "judge", retries=1, backoff=0.0)

    class Failing:
        name = "flaky"

        def __init__(self):
            self.items = set()

        def chat(self, images, text):
            if "Editing instruction:" in text:  # SC is asked first for each item
                self.items.add(text)
            return canned.chat(images, text) if len(self.items) <= 2 else down.chat(images, text)

    store = new_store(tmp_path)
    with pytest.raises(JudgeUnavailableError, match=url.replace(".", r"\.")) as err:
        judge_rows(rows, results, "tiny", Failing(), store)
    assert isinstance(err.value, PacoError) and isinstance(err.value, ConnectionError)
    assert len(store) == 2  # the two items answered before the endpoint went down
    first = {r[RESULTS_KEY]: r for r in store.rows()}
    canned.asked = []
    store = new_store(tmp_path)  # the file, reopened as a re-run does
    counts = judge_rows(rows, results, "tiny", canned, store)
    assert counts == {"scored": 2, "missing_edit": 0, "skipped": 2}
    stored = {r["instruction"] for r in first.values()}
    assert not any(i in t for t in canned.asked for i in stored)  # no item judged twice
    assert all(store.get(k) == v for k, v in first.items())
    assert sorted(stored_lines(store)) == sorted(r.item_id for r in rows)  # each row once


def test_heldout_preset_is_papers_draw():
    import random

    random.seed(42)
    assert paco_heldout_indices(1212) == random.sample(range(1212), 128)
