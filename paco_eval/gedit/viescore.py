"""VIEScore for GEdit-Bench: the two prompts, the answer parser and one item's SC / PQ / O.

Per item (Step1X-Edit@570eba6 ``test_gedit_score.py::process_single_item`` and
``viescore/__init__.py::VIEScore.evaluate`` with ``task="tie"``): the edit is converted to RGB
and resized to the source's size (PIL's default resample); the judge answers the SC prompt
about [source, edit] (editing success, over-editing) and the PQ prompt about the edit alone
(naturalness, artifacts), each a JSON ``{"score": [..], "reasoning": ..}``;
``SC = min(SC scores)``, ``PQ = min(PQ scores)``, ``O = sqrt(SC * PQ)``.

Two modes (``mode=``):

* ``"default"``: the answer must hold a score list of integers 0-10 (the forms the released
  parser accepts: the ``||V^=^V||`` delimiters, a ``{...}`` object, repaired unquoted keys, a
  bare ``[a, b]`` list, a bare integer; a fenced block is a ``{...}`` object inside fences);
  ``SC`` and ``PQ`` need two scores each, as the prompts ask. A prompt whose answer does not
  parse is asked again up to ``max_tries`` times in all, alone (the other answer is kept);
  then the item is *missing*: its scores are NaN with the reason, counted in coverage. No
  guess, no unbounded loop, no score outside 0-10.
* ``REFERENCE`` (``"step1x@570eba6+qwen_seeded"``): the released parser's behaviour, quirks
  included, as its Qwen2.5-VL route makes them deterministic. The loop asks both prompts
  again while either fails to parse; from the second try an answer without ``{``/``}`` gets
  ``random.randint(0, 10)`` with the generator seeded 42 before both parses (``set_seed(42)``
  runs inside each ``get_parsed_output`` and both calls precede both parses), so a guessed
  SC is 10 and a guessed PQ is 1 after a guessed SC, else 10. No range or type check;
  ``min`` and ``sqrt`` are Python's, and an item on which they raise (a string score, an
  empty list, a negative product) is missing, as the released retry loop drops it after its
  10,000 retries. An answer with braces that neither ``json.loads`` nor ``fix_json`` accept
  would loop forever there: here the item is missing after ``max_tries`` with that reason.

    >>> parse_scores('{"score": [7, 9], "reasoning": "ok"}', expected=2)
    [7, 9]
    >>> reference_parse("[6, 0]", give_up=False)["score"]
    [6, 0]
    >>> reference_parse("no json here", give_up=True, rng=random.Random(42))["score"]
    [10]
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from paco_eval.chat_judge import ChatJudge
from paco_eval.gedit.prompts import PQ_PROMPT, render_sc
from paco_reward.errors import InputError, PacoError

__all__ = [
    "MODES",
    "REFERENCE",
    "ItemScore",
    "ScoreParseError",
    "parse_scores",
    "prepare_edit",
    "reference_parse",
    "score_item",
]

#: The ``mode`` that mirrors the released code (Step1X-Edit's Qwen route, seeded).
REFERENCE = "step1x@570eba6+qwen_seeded"
MODES = ("default", REFERENCE)
DELIMITER = "||V^=^V||"


class ScoreParseError(PacoError, ValueError):
    """A judge answer holds no usable score list; the message says why (no JSON, a score out
    of 0-10, a float, the wrong number of scores)."""


# ---------------------------------------------------------------------- the released parser
def _fix_json(text: str) -> str:
    """A restatement of ``viescore/utils.py::fix_json``: quote bare keys, then wrap a numeric
    value in a list and quote any other non-literal value."""
    fixed = re.sub(r"(\w+):", r'"\1":', text)

    def value(match: re.Match) -> str:
        key, val, end = match.groups()
        val = val.strip()
        if re.match(r"^-?\d+(\.\d+)?$", val):
            val = f"[{val}]"
        elif not re.match(r"^(true|false|null)$", val, re.IGNORECASE):
            val = f'"{val}"'
        return f"{key}: {val}{end}"

    return re.sub(r'(".*?"):(.*?)(,|})', value, fixed)


def _is_int_0_10(text: str) -> bool:
    try:
        return 0 <= int(text) <= 10
    except ValueError:
        return False


def reference_parse(text: str, give_up: bool, rng: random.Random | None = None) -> Any:
    """``viescore/utils.py::mllm_output_to_dict`` restated: the parsed dict, or ``False``
    when the released parser returns ``False``.

    Args:
        text: the judge's answer.
        give_up: the released ``give_up_parsing`` (True from the loop's second try): an
            answer without ``{``/``}`` then gets a random score, even a bare list.
        rng: the generator of that guess (the released code uses the module ``random``).
    """
    if text == "rate_limit_exceeded":
        return "rate_limit_exceeded"
    if text.count(DELIMITER) == 2:
        start = text.find(DELIMITER) + len(DELIMITER)
        end = text.rfind(DELIMITER)
    else:
        start, end = text.find("{"), text.rfind("}") + 1
        if start == -1 or end == 0:
            start, end = text.find("["), text.rfind("]") + 1
            if give_up:
                guess = (rng or random).randint(0, 10)
                text = json.dumps(
                    {"score": [guess], "reasoning": f"guess_if_cannot_parse | {text}"}
                )
                start, end = 0, len(text)
            elif re.match(r"^\[\d+, ?\d+\]$", text[start:end]):
                scores = json.loads(text[start:end])
                text = json.dumps(
                    {"score": scores, "reasoning": "System: output is simply a list of scores"}
                )
                start, end = 0, len(text)
            elif _is_int_0_10(text):
                text = json.dumps(
                    {"score": [int(text)], "reasoning": "System: output is simply a number"}
                )
                start, end = 0, len(text)
            else:
                return False
    if start == -1 or end == -1 or start == end:
        return False
    body = text[start:end].strip().replace("\n", "")
    try:
        data = json.loads(body)
        if not isinstance(data["score"], list):
            data["score"] = [data["score"]]
    except Exception:  # the released code's bare except: a KeyError or TypeError too
        try:
            return json.loads(_fix_json(body))  # returned as is: a scalar stays a scalar
        except Exception:
            return False
    return data


# ---------------------------------------------------------------------- the default parser
def parse_scores(text: str, expected: int = 2) -> list[int]:
    """The score list of a judge answer, validated: integers 0-10, exactly ``expected`` of
    them. Accepts the forms the released parser does, and never guesses.

    Raises:
        ScoreParseError: no score list, the wrong type or count, a score out of range.

    Example:
        >>> parse_scores("||V^=^V||{\\"score\\": [3, 4]}||V^=^V||")
        [3, 4]
        >>> parse_scores("[11, 3]")
        Traceback (most recent call last):
        ...
        paco_eval.gedit.viescore.ScoreParseError: score 11 is out of 0-10 in '[11, 3]'
    """
    if not isinstance(text, str) or not text.strip():
        raise ScoreParseError("the judge answered nothing (empty text)")
    data = reference_parse(text, give_up=False)
    if data is False or data == "rate_limit_exceeded":
        raise ScoreParseError(f"no score JSON in {text[:120]!r}")
    scores = data.get("score") if isinstance(data, dict) else None
    if scores is None:
        raise ScoreParseError(f"no 'score' field in {text[:120]!r}")
    if not isinstance(scores, list):
        scores = [scores]
    out: list[int] = []
    for value in scores:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScoreParseError(f"score {value!r} is not a number in {text[:120]!r}")
        if isinstance(value, float) and not value.is_integer():
            raise ScoreParseError(f"score {value!r} is not an integer in {text[:120]!r}")
        if not 0 <= value <= 10:
            raise ScoreParseError(f"score {value!r} is out of 0-10 in {text[:120]!r}")
        out.append(int(value))
    if len(out) != expected:
        raise ScoreParseError(f"expected {expected} scores, got {len(out)} in {text[:120]!r}")
    return out


# ---------------------------------------------------------------------- one item
@dataclass
class ItemScore:
    """SC / PQ / O of one item (NaN when missing, with ``reason``), the judge answers, and how
    many judge calls and guesses it took."""

    sc: float
    pq: float
    overall: float
    reason: str | None = None
    answers: dict[str, list[str]] = field(default_factory=dict)
    calls: int = 0
    guessed: list[str] = field(default_factory=list)

    @property
    def scored(self) -> bool:
        return self.reason is None

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict (NaN written as ``null``)."""

        def num(x: float) -> float | None:
            return None if isinstance(x, float) and math.isnan(x) else x

        return {
            "sc": num(self.sc),
            "pq": num(self.pq),
            "overall": num(self.overall),
            "reason": self.reason,
            "answers": self.answers,
            "calls": self.calls,
            "guessed": self.guessed,
        }


def prepare_edit(source: Image.Image, edited: Image.Image) -> Image.Image:
    """The edit as the released scorer feeds it: RGB, resized to the source's size."""
    return edited.convert("RGB").resize(source.size)


def _missing(reason: str, answers: dict, calls: int) -> ItemScore:
    nan = float("nan")
    return ItemScore(nan, nan, nan, reason=reason, answers=answers, calls=calls)


def score_item(
    judge: ChatJudge | Callable[[list[Image.Image], str], str],
    source: Image.Image,
    edited: Image.Image,
    instruction: str,
    *,
    mode: str = "default",
    max_tries: int = 3,
) -> ItemScore:
    """VIEScore (``task="tie"``) of one edit.

    Args:
        judge: a :class:`~paco_eval.chat_judge.ChatJudge` or a callable ``(images, text) -> str``.
        source: the source image (as stored, ``<key>_SRCIMG.png``).
        edited: the edit (resized to the source here).
        instruction: the editing instruction.
        mode: ``"default"`` or :data:`REFERENCE` (module docstring).
        max_tries: calls per prompt (default mode) or loop iterations (reference) before the
            item is missing.

    Raises:
        InputError: an unknown mode or ``max_tries < 1``.
        JudgeUnavailableError: the judge's endpoint is down (nothing is returned for the item).
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {list(MODES)}; got {mode!r}.")
    if max_tries < 1:
        raise InputError(f"max_tries must be >= 1; got {max_tries}.")
    chat = judge.chat if hasattr(judge, "chat") else judge
    edit = prepare_edit(source, edited)
    requests = {"SC": ([source, edit], render_sc(instruction)), "PQ": ([edit], PQ_PROMPT)}
    answers: dict[str, list[str]] = {"SC": [], "PQ": []}
    calls = 0
    if mode == "default":
        got: dict[str, list[int]] = {}
        reasons: list[str] = []
        for name, (images, text) in requests.items():
            for _ in range(max_tries):
                answer = chat(images, text)
                calls += 1
                answers[name].append(answer)
                try:
                    got[name] = parse_scores(answer, expected=2)
                    break
                except ScoreParseError as err:
                    last = str(err)
            else:
                reasons.append(f"{name} unparsed after {max_tries} tries: {last}")
        if reasons:
            return _missing("; ".join(reasons), answers, calls)
        sc, pq = float(min(got["SC"])), float(min(got["PQ"]))
        return ItemScore(sc, pq, math.sqrt(sc * pq), answers=answers, calls=calls)

    # reference: both prompts again while either fails; guesses from the second try on
    for attempt in range(1, max_tries + 1):
        give_up = attempt > 1
        sc_answer, pq_answer = chat(*requests["SC"]), chat(*requests["PQ"])
        calls += 2
        answers["SC"].append(sc_answer)
        answers["PQ"].append(pq_answer)
        rng = random.Random(42)  # set_seed(42) in each call, both before the parses
        sc_dict = reference_parse(sc_answer, give_up, rng)
        pq_dict = reference_parse(pq_answer, give_up, rng)
        if sc_dict is not False and pq_dict is not False:
            break
    else:
        return _missing(
            f"reference parser rejects the answer after {max_tries} tries (the released loop "
            "never ends on it)",
            answers,
            calls,
        )
    guessed = [
        name
        for name, d in (("SC", sc_dict), ("PQ", pq_dict))
        if isinstance(d, dict) and str(d.get("reasoning", "")).startswith("guess_if_cannot_parse")
    ]
    try:
        if "rate_limit_exceeded" in (sc_dict, pq_dict):
            raise ValueError("rate_limit_exceeded")
        sc, pq = min(sc_dict["score"]), min(pq_dict["score"])
        overall = math.sqrt(sc * pq)
    except Exception as err:  # the released process_single_item drops the item after retries
        return _missing(f"released scorer raises {type(err).__name__}: {err}", answers, calls)
    result = ItemScore(sc, pq, overall, answers=answers, calls=calls, guessed=guessed)
    return result
