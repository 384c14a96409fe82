"""Stage 6: reasons from an OpenAI-compatible teacher (a local server) and the offline
template reasoner; retries, back-off, rejection, and kill-and-resume."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_pipeline.pairs import read_pairs
from data_pipeline.pipeline import synthetic_teacher
from data_pipeline.reasons import (
    OpenAITeacher,
    ReasonRejected,
    ReasonStore,
    TemplateReasoner,
    annotate_reasons,
    attribute_comparison,
    check_reason,
    parse_attribute_comparison,
)
from data_pipeline.synthetic import SyntheticWorld, attribute_words, panel_attributes
from paco_reward.errors import InputError, UsageError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "text, label, expected",
    [
        ("Yes. Both show the same red fox.", 1, "Both show the same red fox."),
        (
            "**No** - the fox turns blue in the second image.",
            0,
            "The fox turns blue in the second image.",
        ),
        (
            "The fox keeps its colour and the style matches.",
            1,
            "The fox keeps its colour and the style matches.",
        ),
        (
            "No. The images are not consistent: the fox is blue.",
            0,
            "The images are not consistent: the fox is blue.",
        ),
        (
            "No. The style is consistent, but the fox changes colour.",
            0,
            "The style is consistent, but the fox changes colour.",
        ),
    ],
)
def test_check_reason_accepts(text, label, expected):
    """Also: partial consistency inside a "No" reason is fine."""
    assert check_reason(text, label) == expected


@pytest.mark.parametrize(
    "text, label, match",
    [
        ("No, the fox is blue.", 1, "starts with 'No' but the label is 1"),
        ("yes the same fox", 0, "starts with 'yes' but the label is 0"),
        ("Yes.", 1, "too short"),
        ("Yes. The two images are inconsistent in style.", 1, "claims inconsistency"),
        ("No. The two images are fully consistent in every way.", 0, "claims consistency"),
    ],
)
def test_check_reason_rejects(text, label, match):
    with pytest.raises(ReasonRejected, match=match):
        check_reason(text, label)


def test_openai_teacher_retries_errors_and_contradictions(pairs_work, teacher_server):
    url, state = teacher_server(fail_first=1, contradict_first=1)
    pairs = read_pairs(pairs_work)[:12]
    store = pairs_work / "reasons.jsonl"
    teacher = OpenAITeacher(url, "teacher")
    stats = annotate_reasons(
        pairs, teacher, store, image_root=pairs_work, concurrency=3, backoff_s=0.01, progress=False
    )
    assert (stats.done, stats.errors, stats.rejected, stats.failed) == (12, 12, 12, 0)
    assert stats.requests == 36 and len(state.requests) == 36
    assert state.max_inflight <= 3
    saved = ReasonStore(store).load()
    for p in pairs:
        record = saved[p["pair_id"]]
        assert record["attempts"] == 3 and record["teacher"] == "openai:teacher"
        assert record["label"] == p["label"]
        assert ("same character" in record["reasons"]) == bool(p["label"])
        assert not record["reasons"].startswith(("Yes", "No"))
    # Nothing is asked twice: a second run only skips.
    again = annotate_reasons(pairs, teacher, store, image_root=pairs_work, progress=False)
    assert (again.skipped, again.requests, len(state.requests)) == (12, 0, 36)


def test_openai_teacher_request_text_for_set_and_edit_pairs(random_images):
    teacher = OpenAITeacher("http://127.0.0.1:9/v1", "teacher")
    a, b = random_images(2)
    pair = {"pair_id": "p", "label": 0, "prompt": "a red fox", "template": "consistency"}
    content = teacher.messages(pair, a, b)[0]["content"]
    assert [c["type"] for c in content] == ["image_url", "image_url", "text"]
    assert content[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert 'theme "a red fox"' in content[2]["text"] and "is NOT consistent" in content[2]["text"]
    edit = {**pair, "label": 1, "prompt": "add a hat", "template": "edit_consistency"}
    text = teacher.messages(edit, a, b)[0]["content"][2]["text"]
    assert "instruction: 'add a hat'" in text and "Start your answer with 'Yes.'" in text


def test_exhausted_attempts_leave_pair_for_next_run(pairs_work, teacher_server):
    url, state = teacher_server(fail_first=3)
    pairs = read_pairs(pairs_work)[:3]
    store = pairs_work / "reasons.jsonl"
    teacher = OpenAITeacher(url, "teacher")
    start = time.perf_counter()
    stats = annotate_reasons(
        pairs, teacher, store, image_root=pairs_work, max_attempts=3, backoff_s=0.1, progress=False
    )
    elapsed = time.perf_counter() - start
    assert (stats.done, stats.failed, stats.requests) == (0, 3, 9)
    assert ReasonStore(store).load() == {}
    # Exponential back-off: waits of 0.1 and 0.2 s, each jittered to at least half.
    assert elapsed >= 0.15
    stats = annotate_reasons(
        pairs, teacher, store, image_root=pairs_work, backoff_s=0.01, progress=False
    )
    assert stats.done == 3 and set(ReasonStore(store).load()) == {p["pair_id"] for p in pairs}


def test_changed_label_is_asked_again(pairs_work):
    pairs = read_pairs(pairs_work)[:2]
    store = pairs_work / "reasons.jsonl"
    annotate_reasons(pairs, TemplateReasoner(), store, load_images=False, progress=False)
    flipped = [{**pairs[0], "label": 1 - pairs[0]["label"]}, pairs[1]]
    stats = annotate_reasons(flipped, TemplateReasoner(), store, load_images=False, progress=False)
    assert (stats.done, stats.skipped) == (1, 1)
    assert ReasonStore(store).load()[pairs[0]["pair_id"]]["label"] == 1 - pairs[0]["label"]


def test_template_reasoner_names_synthetic_attributes(pairs_work):
    teacher = synthetic_teacher(pairs_work)
    pairs = read_pairs(pairs_work)
    no = next(p for p in pairs if p["label"] == 0)
    yes = next(p for p in pairs if p["label"] == 1)
    text_no = asyncio.run(teacher.areason(no, None, None))
    text_yes = asyncio.run(teacher.areason(yes, None, None))
    assert text_no.startswith("No. Shape ") and text_yes.startswith("Yes. Shape ")
    # One clause per attribute, each saying whether the two panels agree on it.
    clauses = text_no[len("No. ") :].rstrip(".").split("; ")
    assert [c.split()[0].lower() for c in clauses] == [
        "shape", "colour", "marking", "palette", "texture", "outline"
    ]  # fmt: skip
    # The verdict comes first, then the two values it compares.
    assert all(c.split(",")[0].split()[1:] in (["same"], ["different"]) for c in clauses)
    assert all(len(c.split(", ")[1].split(" and ")) == 2 for c in clauses)
    assert any(c.split(",")[0].endswith(" different") for c in clauses)
    assert check_reason(text_no, 0) and check_reason(text_yes, 1)


def test_attribute_comparisons_parse_back_with_the_worlds_vocabulary():
    world = SyntheticWorld(seed=0)
    words = attribute_words()
    for record in world.make_prompts(4):
        a, b = (panel_attributes(world.panel_specs(record, g)[g]) for g in (0, 3))
        text = attribute_comparison(a, b)
        assert parse_attribute_comparison(text, words) == [
            (key, a[key] == b[key], a[key], b[key]) for key in a
        ]
    good = attribute_comparison(a, b)
    clauses = good.removesuffix(".").split("; ")
    for broken in (
        "; ".join(clauses[:-1]) + ".",  # an attribute left out (cut short)
        good.replace(" same,", " alike,", 1).replace(" different,", " alike,", 1),
        good.replace(f", {a['shape']} and", ", blob and", 1),  # not a word of the world
        "; ".join([clauses[0], *clauses]) + ".",  # an attribute twice
        "Both show the same character.",
    ):
        assert parse_attribute_comparison(broken, words) is None, broken
    assert parse_attribute_comparison("; ".join(clauses[:2])) is not None  # no vocabulary


def test_store_tolerates_a_truncated_last_line(tmp_path):
    path = tmp_path / "reasons.jsonl"
    store = ReasonStore(path)
    store.add({"pair_id": "a", "label": 1}, "fine", "t", 1)
    with open(path, "a") as handle:
        handle.write('{"pair_id": "b", "lab')  # killed mid-write
    assert set(store.load()) == {"a"}
    store.add({"pair_id": "c", "label": 0}, "fine", "t", 1)
    assert set(store.load()) == {"a", "c"}
    assert json.loads(path.read_text().splitlines()[-1])["pair_id"] == "c"


def test_validation_and_event_loop_guard(tmp_path):
    with pytest.raises(InputError, match="concurrency must be >= 1"):
        annotate_reasons([], TemplateReasoner(), tmp_path / "r.jsonl", concurrency=0)
    with pytest.raises(InputError, match="max_attempts must be >= 1"):
        annotate_reasons([], TemplateReasoner(), tmp_path / "r.jsonl", max_attempts=0)

    async def inside():
        annotate_reasons([], TemplateReasoner(), tmp_path / "r.jsonl")

    with pytest.raises(UsageError, match="await aannotate_reasons"):
        asyncio.run(inside())


@pytest.mark.slow
def test_kill_and_resume_loses_nothing_and_asks_nothing_twice(pairs_work, teacher_server):
    url, state = teacher_server(delay=0.05)
    pairs = read_pairs(pairs_work)
    store = pairs_work / "reasons.jsonl"
    cmd = [
        sys.executable, "-m", "data_pipeline.cli", "reasons", str(pairs_work),
        "--teacher", "openai", "--base-url", url, "--model", "teacher",
        "--concurrency", "4", "--backoff_s", "0.01", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.time() + 90
    while time.time() < deadline and proc.poll() is None:
        if len(ReasonStore(store).load()) >= 10:
            break
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    first = ReasonStore(store).load()
    assert 10 <= len(first) < len(pairs), proc.stdout.read().decode()[-2000:]
    asked_before = len(state.requests)
    state.requests.clear()

    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    final = ReasonStore(store).load()
    assert set(final) == {p["pair_id"] for p in pairs}  # nothing lost
    assert not set(first) & set(state.requests)  # nothing finished asked again
    assert all(final[k] == v for k, v in first.items())  # finished reasons untouched
    assert len(state.requests) == len(pairs) - len(first)  # only the unfinished ones asked
    assert asked_before >= len(first)
    ids = [json.loads(line)["pair_id"] for line in store.read_text().splitlines() if line.strip()]
    assert len(ids) == len(set(ids)) == len(pairs)
    labels = {p["pair_id"]: p["label"] for p in pairs}
    assert all(final[k]["label"] == labels[k] for k in final)
