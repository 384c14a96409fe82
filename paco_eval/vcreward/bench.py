"""VCReward-Bench (GEditBench_v2@82bc00e): does a judge pick the edit that better preserves
what the instruction did not target, as the experts did?

Rows: ``key`` (``<task>_pair_<idx>``), ``instruction``, ``source_image``, ``edited_images``
(two), ``winner`` (``"Image A"`` | ``"Image B"``), ``task`` (21 tasks). Loaded from the hub's
parquet (image columns) or the pre-release folder layout (``metadata.jsonl`` with image paths
relative to the folder); any subset of tasks works.

Judges:

* :class:`ChatPairJudge`: a chat judge shown the released prompt
  (:mod:`paco_eval.vcreward.prompt`); its answer's winner is read by the released parser
  (``json_util.py::extract_winner_from_text``, restated in :func:`extract_winner`).
* :class:`PointwiseJudge`: any P(Yes) scorer (a :class:`paco_reward.PacoReward`, in-process or
  served), pointwise with the editing template: score (source, A) and (source, B); the higher
  wins, equal is a tie.

Accuracy (:func:`accuracy`), by convention:

* ``"default"``: winners normalised (case, ``image``, ``_`` and spaces ignored; ``equal`` is a
  tie); ``accuracy_strict`` counts ties, failures and unparsed answers wrong over all pairs,
  ``accuracy_answered`` is over the pairs with an A/B/Tie answer, ``coverage`` the share
  answered; per task, overall (micro over pairs) and split by which position the experts chose.
  With both orders scored (``swap=True``) a pair's correctness is the mean over the orders.
* ``"geditv2@82bc00e:autopipeline"``: the API pipeline: winners normalised by its judge
  (``modules/judge.py``: ``image_a``/``image a``/``a``, ``tie``/``equal``/``both``/``none``,
  else ``Failed``), rows whose winner is ``Failed`` or ``Tie`` dropped
  (``cli/autopipeline.py::_write_eval_results``), then ``calc_vc_reward``: exact string compare,
  task = ``key.split("_pair_")[0]``, micro over pairs (without its crash when a task of the 21
  is absent).
* ``"geditv2@82bc00e:local"``: ``run_eval.py::infer_reward_bench``: a winner that is ``None`` or
  whose lower case is not one of ``image a, a, image_a, imagea, image b, b, image_b, imageb,
  tie, equal`` is skipped; the rest compare as raw strings, so ``"image a"``, ``"A"`` and
  ``"Tie"`` count wrong and stay in the denominator.

    >>> recs = [{"key": "color_alteration_pair_0", "task": "color_alteration",
    ...          "gt_winner": "Image A", "winner": "image a"}]
    >>> accuracy(recs)["overall"]["accuracy_strict"], accuracy(recs, LOCAL)["overall"]["accuracy"]
    (1.0, 0.0)
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from paco_eval.harness import ResultsStore
from paco_eval.vcreward.prompt import build_messages
from paco_reward.errors import InputError, PathNotFoundError

__all__ = [
    "AUTOPIPELINE",
    "CONVENTIONS",
    "LOCAL",
    "TASKS",
    "ChatPairJudge",
    "PointwiseJudge",
    "VCPair",
    "accuracy",
    "extract_winner",
    "load_pairs",
    "normalize_winner",
]

AUTOPIPELINE = "geditv2@82bc00e:autopipeline"
LOCAL = "geditv2@82bc00e:local"
CONVENTIONS = ("default", AUTOPIPELINE, LOCAL)

#: The 21 task names of the data (``calculate_statistics.py::TASK_NAME_MAP``'s values), in the
#: order of its per-task line.
TASKS = (
    "subject_addition",
    "subject_removal",
    "subject_replace",
    "size_adjustment",
    "color_alteration",
    "material_modification",
    "portrait_beautification",
    "motion_change",
    "relation_change",
    "text_editing",
    "in_image_text_translation",
    "chart_editing",
    "background_change",
    "style_transfer",
    "tone_transfer",
    "enhancement",
    "camera_motion",
    "line2image",
    "character_reference",
    "object_reference",
    "style_reference",
)
LOCAL_ACCEPTED = (
    "image a",
    "a",
    "image_a",
    "imagea",
    "image b",
    "b",
    "image_b",
    "imageb",
    "tie",
    "equal",
)


# ---------------------------------------------------------------------- data
@dataclass(frozen=True)
class VCPair:
    """One expert-labelled pair; images are PIL images or paths."""

    key: str
    task: str
    instruction: str
    source: Any
    edits: tuple[Any, Any]
    winner: str


def _image(value: Any, base: Path | None) -> Any:
    if isinstance(value, dict) and value.get("bytes") is not None:
        return Image.open(io.BytesIO(value["bytes"]))
    if isinstance(value, str) and base is not None:
        return base / value
    return value


def load_pairs(data: str | Path, tasks: Sequence[str] | None = None) -> list[VCPair]:
    """The benchmark's pairs.

    Args:
        data: a folder with ``metadata.jsonl`` (image paths relative to it), a parquet file,
            or a folder of parquet files.
        tasks: keep these tasks (default all present).

    Raises:
        PathNotFoundError: ``data`` does not exist.
        InputError: a row lacks a column or has a winner other than ``Image A``/``Image B``;
            a task in ``tasks`` is not in the data.
    """
    path = Path(data)
    if not path.exists():
        raise PathNotFoundError(
            f"VCReward-Bench data {str(path)!r} does not exist; give a folder with "
            "metadata.jsonl or the hub parquet."
        )
    if path.is_dir() and (path / "metadata.jsonl").is_file():
        text = (path / "metadata.jsonl").read_text(encoding="utf-8")
        records, base = [json.loads(line) for line in text.splitlines() if line.strip()], path
    else:
        from datasets import load_dataset

        files = sorted(path.glob("**/*.parquet")) if path.is_dir() else [path]
        records = list(load_dataset("parquet", data_files=[str(f) for f in files], split="train"))
        base = None
    pairs = []
    for n, rec in enumerate(records):
        missing = [
            c
            for c in ("key", "instruction", "source_image", "edited_images", "winner")
            if c not in rec
        ]
        if missing:
            raise InputError(f"VCReward-Bench row {n} lacks the column(s) {missing}.")
        if rec["winner"] not in ("Image A", "Image B") or len(rec["edited_images"]) != 2:
            raise InputError(
                f"VCReward-Bench row {rec['key']!r}: winner must be 'Image A' or 'Image B' with "
                f"two edited images; got {rec['winner']!r} and {len(rec['edited_images'])}."
            )
        task = rec.get("task") or str(rec["key"]).split("_pair_")[0]
        edits = tuple(_image(e, base) for e in rec["edited_images"])
        pairs.append(
            VCPair(
                str(rec["key"]),
                task,
                rec["instruction"],
                _image(rec["source_image"], base),
                edits,
                rec["winner"],
            )
        )
    if tasks is not None:
        present = sorted({p.task for p in pairs})
        unknown = [t for t in tasks if t not in present]
        if unknown:
            raise InputError(f"Unknown VCReward-Bench task(s) {unknown}; the data has {present}.")
        pairs = [p for p in pairs if p.task in set(tasks)]
    return pairs


# ---------------------------------------------------------------------- winners
def extract_winner(text: str | None) -> str | None:
    """``json_util.py::extract_winner_from_text`` restated: the ``winner`` value of the first
    JSON object after the reasoning wrappers, verbatim, or ``None``."""
    if not isinstance(text, str):
        return None
    if "<think>" in text:
        if "</think>" not in text:
            return None
        text = text.split("</think>")[-1]
    if "</analysis>" in text:
        text = text.split("</analysis>")[-1]
    if "<|begin_of_box|>" in text:
        if "<|end_of_box|>" not in text:
            return None
        text = text.split("<|begin_of_box|>")[-1]
    if "```json" in text:
        text = text.split("```json")[1].split("```")[0]
    text = text.replace("\n", " ").replace("\\n", " ")
    starts = [i for i in (text.find("{"), text.find("[")) if i != -1]
    ends = [i for i in (text.rfind("}"), text.rfind("]")) if i != -1]
    if not starts or not ends or max(ends) < min(starts):
        return None
    try:
        data = json.loads(text[min(starts) : max(ends) + 1])
    except json.JSONDecodeError:
        return None
    return data.get("winner") if isinstance(data, dict) else None


def normalize_winner(winner: Any) -> str | None:
    """``"A"``, ``"B"``, ``"Tie"`` or ``None`` (unparsed): case, ``image``, ``_`` and spaces
    ignored; ``equal`` is a tie.

    >>> [normalize_winner(w) for w in ("Image B", "image a", "A", "Tie", "equal", None, "C")]
    ['B', 'A', 'A', 'Tie', 'Tie', None, None]
    """
    if not isinstance(winner, str):
        return None
    w = winner.strip().lower().replace("image", "").replace("_", "").replace(" ", "")
    return {"a": "A", "b": "B", "tie": "Tie", "equal": "Tie"}.get(w)


def _autopipeline_winner(winner: Any) -> str:
    """The API pipeline judge's normalisation (``modules/judge.py``)."""
    if not isinstance(winner, str):
        return "Failed"
    w = winner.lower()
    if w in ("image_a", "image a", "a"):
        return "Image A"
    if w in ("image_b", "image b", "b"):
        return "Image B"
    if w in ("tie", "equal", "both", "none"):
        return "Tie"
    return "Failed"


# ---------------------------------------------------------------------- judges
class ChatPairJudge:
    """A chat judge asked the released pairwise prompt.

    Args:
        chat_judge: an :class:`~paco_eval.chat_judge.OpenAIChatJudge` (the prompt interleaves
            text and images, so it needs ``chat_messages``).
    """

    def __init__(self, chat_judge: Any) -> None:
        if not hasattr(chat_judge, "chat_messages"):
            raise InputError(
                f"{type(chat_judge).__name__} cannot send the interleaved VCReward-Bench prompt "
                "(no chat_messages); serve the model behind an OpenAI-compatible endpoint "
                "(vllm serve, paco-reward serve) and use OpenAIChatJudge."
            )
        self.chat_judge = chat_judge
        self.name = chat_judge.name

    def judge(self, instruction: str, source: Image.Image, a: Image.Image, b: Image.Image) -> dict:
        """``{"winner": <released parser's value>, "answer": <text>}`` for (A, B)."""
        answer = self.chat_judge.chat_messages(build_messages(instruction, source, [a, b]))
        return {"winner": extract_winner(answer), "answer": answer}


class PointwiseJudge:
    """A P(Yes) scorer judging a pair pointwise: the edit with the higher editing-consistency
    score (template ``edit_consistency``, the instruction in it) wins; equal scores tie; a NaN
    score leaves the pair unanswered.

    Args:
        reward: a :class:`paco_reward.PacoReward` (anything with ``score_pairs``).
        name: the name in reports.
        template: the editing template (``edit_consistency``).
    """

    def __init__(self, reward: Any, name: str = "PaCo-Reward", template: str = "edit_consistency"):
        self.reward = reward
        self.name = name
        self.template = template

    def judge(self, instruction: str, source: Image.Image, a: Image.Image, b: Image.Image) -> dict:
        """``{"winner", "scores": [score_A, score_B]}``."""
        sa, sb = (
            float(x)
            for x in self.reward.score_pairs(
                [(source, a, instruction), (source, b, instruction)], template=self.template
            )
        )
        if math.isnan(sa) or math.isnan(sb):
            winner = None
        else:
            winner = "Image A" if sa > sb else "Image B" if sb > sa else "Tie"
        return {"winner": winner, "scores": [sa, sb]}


def swap_back(winner: str | None) -> str | None:
    """A winner given with the edits swapped, in the original positions."""
    w = normalize_winner(winner)
    return {"A": "Image B", "B": "Image A", "Tie": "Tie"}.get(w) if w else None


# ---------------------------------------------------------------------- accuracy
def _released_counts(pairs: list[tuple[str, bool]]) -> dict[str, Any]:
    tasks: dict[str, dict[str, Any]] = {}
    for task, correct in pairs:
        t = tasks.setdefault(task, {"correct": 0, "total": 0})
        t["correct"] += int(correct)
        t["total"] += 1
    for t in tasks.values():
        t["accuracy"] = t["correct"] / t["total"] if t["total"] else 0.0
    c, n = sum(t["correct"] for t in tasks.values()), sum(t["total"] for t in tasks.values())
    return {"tasks": tasks, "overall": {"correct": c, "total": n, "accuracy": c / n if n else 0.0}}


def accuracy(
    records: Sequence[dict], convention: str = "default", *, pipeline_normalized: bool = False
) -> dict[str, Any]:
    """Accuracy of judged pairs under a convention (module docstring).

    Args:
        records: per pair ``key``, ``task``, ``gt_winner``, ``winner`` (the judge's raw winner,
            ``None`` when unparsed) and, when both orders were scored, ``winner_swapped``
            (already mapped back to the original positions).
        convention: ``"default"``, :data:`AUTOPIPELINE` or :data:`LOCAL`.
        pipeline_normalized: with :data:`AUTOPIPELINE`, the winners are already what the
            pipeline's judge wrote (a released ``eval_vc`` results file): they are filtered
            and compared as they are, not normalised first.

    Raises:
        InputError: an unknown convention.
    """
    if convention not in CONVENTIONS:
        raise InputError(
            f"Unknown VCReward-Bench convention {convention!r}; choose one of {list(CONVENTIONS)}."
        )
    if convention == AUTOPIPELINE:
        norm = (lambda w: w) if pipeline_normalized else _autopipeline_winner
        kept = [
            (r, norm(r["winner"])) for r in records if norm(r["winner"]) not in ("Failed", "Tie")
        ]
        out = _released_counts(
            [(r["key"].split("_pair_")[0], r["gt_winner"] == w) for r, w in kept]
        )
        out["dropped"] = len(records) - len(kept)
        return out | {"convention": convention}
    if convention == LOCAL:
        kept = [
            r
            for r in records
            if r["winner"] is not None and str(r["winner"]).lower() in LOCAL_ACCEPTED
        ]
        out = _released_counts([(r["task"], r["winner"] == r["gt_winner"]) for r in kept])
        out["skipped"] = len(records) - len(kept)
        return out | {"convention": convention}

    def credit(r: dict) -> tuple[float, float]:
        """(correctness in [0, 1], share of orders answered)."""
        gt = normalize_winner(r["gt_winner"])
        winners = [r["winner"]] + ([r["winner_swapped"]] if "winner_swapped" in r else [])
        got = [normalize_winner(w) for w in winners]
        correct = sum(g == gt for g in got) / len(got)
        answered = sum(g is not None for g in got) / len(got)
        return correct, answered

    def summary(rs: list[dict]) -> dict[str, Any]:
        c = [credit(r) for r in rs]
        n, correct, answered = len(rs), sum(x for x, _ in c), sum(a for _, a in c)
        return {
            "pairs": n,
            "correct": correct,
            "answered": answered,
            "accuracy_strict": correct / n if n else float("nan"),
            "accuracy_answered": correct / answered if answered else float("nan"),
            "coverage": answered / n if n else float("nan"),
        }

    tasks = sorted({r["task"] for r in records})
    by_gt = {
        gt: summary([r for r in records if normalize_winner(r["gt_winner"]) == gt])
        for gt in ("A", "B")
    }
    return {
        "convention": "default",
        "tasks": {t: summary([r for r in records if r["task"] == t]) for t in tasks},
        "overall": summary(list(records)),
        "by_gt_winner": by_gt,
        "task_macro_strict": (
            sum(summary([r for r in records if r["task"] == t])["accuracy_strict"] for t in tasks)
            / len(tasks)
            if tasks
            else float("nan")
        ),
    }


# ---------------------------------------------------------------------- stage
def _open(value: Any, what: str) -> Image.Image:
    from paco_eval.gedit.data import open_image

    return open_image(value, what)


def judge_pairs(
    pairs: Sequence[VCPair], judge: Any, store: ResultsStore, *, swap: bool = False
) -> dict:
    """Judge every pair not in ``store`` (the harness's
    :class:`~paco_eval.harness.ResultsStore`, keyed by ``key``) yet: one record per pair,
    appended as it is made, so a judge that goes down loses nothing and a re-run resumes. With
    ``swap`` each pair is also judged with the edits exchanged (``winner_swapped``, mapped back
    to the original positions). Returns ``{"judged", "skipped"}``.

    Raises:
        PathNotFoundError / InvalidImageError: a missing or corrupt image, naming it.
        JudgeUnavailableError: the chat judge's endpoint is down.
    """
    done = store.done_keys()
    counts = {"judged": 0, "skipped": 0}
    for pair in pairs:
        if pair.key in done:
            counts["skipped"] += 1
            continue
        src = _open(pair.source, f"source of {pair.key}")
        a, b = (_open(e, f"edit {k} of {pair.key}") for k, e in zip("AB", pair.edits))
        out = judge.judge(pair.instruction, src, a, b)
        record = {"key": pair.key, "task": pair.task, "gt_winner": pair.winner, **out}
        if swap:
            back = judge.judge(pair.instruction, src, b, a)
            record["winner_swapped"] = swap_back(back["winner"])
            record["swapped"] = back
        store.append(record)
        counts["judged"] += 1
    return counts
