"""GEdit-Bench's judge and report stages (the generate stage is :mod:`paco_eval.gedit.generate`).

judge: every selected row whose edit is in the official layout is scored by VIEScore
(:func:`paco_eval.gedit.viescore.score_item`) with a chat judge; one record per item, appended
durably to the harness's :class:`~paco_eval.harness.ResultsStore` keyed by ``item``
(``<lang>/<key>``), so a re-run skips what is scored
and a judge endpoint that goes down stops the stage (typed error naming the URL) with every
answer stored so far kept. A row whose edit is missing is recorded as missing (not scored,
not a zero); a corrupt image raises, naming the file.

report: per language and subset (full set, ``Intersection_exist``), each group's SC / PQ / O,
the official macro mean over the 11 groups, the micro mean beside it, and coverage.

    >>> rows = load_rows("tests/data/gedit_ref")                                  # doctest: +SKIP
    >>> store = ResultsStore("out/judge.jsonl", fingerprint="...", key="item")     # doctest: +SKIP
    >>> judge_rows(rows, "tests/data/gedit_ref/results", "tiny", judge, store)   # doctest: +SKIP
    >>> report_tables(store.rows())["en"]["fullset"]["macro"]                      # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from paco_eval.chat_judge import ChatJudge
from paco_eval.gedit.data import LANGUAGES, GEditRow, edit_path, open_image, source_path
from paco_eval.gedit.prompts import PQ_PROMPT_SHA256, SC_PROMPT_SHA256
from paco_eval.gedit.statistics import analyze
from paco_eval.gedit.viescore import MODES, REFERENCE, score_item
from paco_eval.harness import ResultsStore
from paco_reward.errors import InputError

__all__ = ["RESULTS_KEY", "judge_rows", "protocol", "report_tables"]

logger = logging.getLogger(__name__)

#: The row field a GEdit-Bench results store is keyed by (``<lang>/<key>``: a key appears
#: once per language, so ``key`` alone is not unique).
RESULTS_KEY = "item"


def protocol(judge: ChatJudge | dict[str, Any], mode: str, max_tries: int) -> dict[str, Any]:
    """How the scores were made: the reference mirrored, prompt hashes, judge (a judge, or
    what its ``protocol()`` says: the report stage names a judge without loading it), resize."""
    return {
        "benchmark": "gedit-bench",
        "reference_code": "stepfun-ai/Step1X-Edit@570eba6 GEdit-Bench/ (VIEScore@2cbea4e prompts)",
        "mode": mode,
        "mirrors": REFERENCE if mode == REFERENCE else None,
        "sc_prompt_sha256": SC_PROMPT_SHA256,
        "pq_prompt_sha256": PQ_PROMPT_SHA256,
        "edit_resize": "edit.convert('RGB').resize(source.size), PIL default resample",
        "max_tries": max_tries,
        "judge": dict(judge)
        if isinstance(judge, dict)
        else judge.protocol()
        if hasattr(judge, "protocol")
        else {"name": str(judge)},
    }


def judge_rows(
    rows: Sequence[GEditRow],
    results_root: str | Path,
    model: str,
    judge: ChatJudge,
    store: ResultsStore,
    *,
    mode: str = "default",
    max_tries: int = 3,
) -> dict[str, int]:
    """Score every row not in ``store`` yet; returns ``{"scored", "missing_edit", "skipped"}``.

    ``store`` is a :class:`~paco_eval.harness.ResultsStore` keyed by :data:`RESULTS_KEY`.

    Raises:
        JudgeUnavailableError: the endpoint is down (what was stored stays stored).
        InvalidImageError: a corrupt source or edit.
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {list(MODES)}; got {mode!r}.")
    if store.key != RESULTS_KEY:
        raise InputError(
            f"a GEdit-Bench results store is keyed by {RESULTS_KEY!r} (<lang>/<key>); got "
            f"{store.key!r}: open it with ResultsStore(..., key={RESULTS_KEY!r})."
        )
    done = store.done_keys()
    counts = {"scored": 0, "missing_edit": 0, "skipped": 0}
    for row in rows:
        if row.item_id in done:
            counts["skipped"] += 1
            continue
        base = {
            "item": row.item_id,
            "key": row.key,
            "task_type": row.task_type,
            "language": row.language,
            "intersection": row.intersection,
            "instruction": row.instruction,
        }
        edit_file = edit_path(results_root, model, row)
        if not edit_file.is_file():
            store.append(
                base
                | {"sc": None, "pq": None, "overall": None, "reason": f"no edit at {edit_file}"}
            )
            counts["missing_edit"] += 1
            continue
        src_file = source_path(results_root, model, row)
        source = open_image(
            src_file if src_file.is_file() else row.source, f"source of {row.item_id}"
        )
        edited = open_image(edit_file, f"edit of {row.item_id}")
        result = score_item(judge, source, edited, row.instruction, mode=mode, max_tries=max_tries)
        store.append(base | result.to_record())
        counts["scored"] += 1
    return counts


def report_tables(
    records: Iterable[dict[str, Any]],
    *,
    mode: str = "default",
    groups: Sequence[str] | None = None,
) -> dict[str, Any]:
    """:func:`paco_eval.gedit.statistics.analyze` per language (``{"en": .., "cn": ..}``) over
    ``groups`` (default all 11: a selection of groups is averaged over itself, else the
    reference mode's headline is NaN as the released script's is for an absent group), plus
    the guessed items (reference mode) and missing reasons."""
    records = list(records)
    rows = [
        r
        | {
            "sc": float("nan") if r["sc"] is None else r["sc"],
            "pq": float("nan") if r["pq"] is None else r["pq"],
        }
        for r in records
    ]
    out: dict[str, Any] = {}
    for lang in LANGUAGES:
        out[lang] = analyze(rows, lang, reference=mode == REFERENCE, groups=groups)
    out["guessed_items"] = sorted(r["item"] for r in records if r.get("guessed"))
    out["missing"] = {r["item"]: r["reason"] for r in records if r.get("reason")}
    return out
