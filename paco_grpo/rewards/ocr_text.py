"""The text side of the ``ocr`` reward: the text a prompt asks for, how texts are compared,
and the score.

The score is Flow-GRPO's OCR reward (``flow_grpo/ocr.py``, ``OcrScorer``): with ``d`` the
Levenshtein distance (unit cost for an inserted, deleted or substituted character) between
the normalised text the OCR model read and the normalised target, an image scores
``1 - min(1, d / len(target))``, except that a reading that holds the target anywhere scores
1.0 (``match="contains"``, the default: a sign that says "OPEN NOW" renders "OPEN"). The
strict rule, ``match="exact"``, charges every character read beyond the target too
(``"OPEN NOW"`` read for ``"open"`` is 3 edits of 4 away: 0.25). The choices
Flow-GRPO's code leaves open, or that differ from it, are fixed here:

- **The target** is the prompt's first quoted span (``spans="first"``, as Flow-GRPO's
  ``prompt.split('"')[1]``), between straight double quotes (``"..."``) or typographic ones
  (``“...”``); ``spans="all"`` joins every span, in order, with a space. Single quotes are not
  read (``don't`` would open one). A prompt with no quoted text, an unclosed quote, or a
  target of nothing but spaces has no target: a :class:`~paco_reward.errors.PromptError`, so
  the item scores NaN with that reason (Flow-GRPO's code raises on the first and divides by
  zero on the last).
- **Normalisation**, of both texts: Unicode NFKC (full-width and ligature forms become plain
  characters), then case folding (the reward is case-insensitive: ``"OPEN"`` read as ``Open``
  scores 1.0), then every whitespace character removed (OCR models break lines and space
  letters as they please; several quoted strings are compared as one run of characters).
  On ASCII text this is Flow-GRPO's ``.replace(' ', '').lower()``; the line breaks it never
  sees (PaddleOCR's lines are joined with nothing) are removed too. Punctuation, digits and
  accents are kept: they are part of the text asked for.
- **An empty reading** (the model read nothing) is a real outcome, not a failure: it is
  ``len(target)`` edits away, so it scores 0.0.

    >>> ocr_score("Open 24 / 7", 'A neon sign that says "OPEN 24/7"')
    1.0
    >>> ocr_score("OPFN", 'A sign that says "OPEN"'), ocr_score("OPEN NOW", 'A sign: "open"')
    (0.75, 1.0)
"""

from __future__ import annotations

import re
import unicodedata

from paco_reward.errors import InputError, PromptError

__all__ = [
    "MATCHES",
    "SPANS",
    "check_ocr_rule",
    "edit_distance",
    "normalize_text",
    "ocr_score",
    "quoted_text",
]

# A span between straight double quotes, or between typographic ones.
_QUOTED = re.compile(r'"([^"]*)"|“([^“”]*)”')
_QUOTE_MARKS = ('"', "“", "”")
MATCHES = ("contains", "exact")
"""How a reading is compared with its target: ``contains`` (Flow-GRPO's: 1.0 when the target
appears anywhere in the reading, else the clipped edit distance) or ``exact`` (the clipped
edit distance of the whole reading)."""
SPANS = ("first", "all")
"""Which quoted text is the target: the prompt's ``first`` span (Flow-GRPO's) or ``all`` of
them, joined by a space."""


def check_ocr_rule(match: str = "contains", spans: str = "first") -> None:
    """Raise :class:`~paco_reward.errors.InputError` unless ``match`` is one of
    :data:`MATCHES` and ``spans`` one of :data:`SPANS`."""
    if match not in MATCHES:
        raise InputError(
            f"match must be one of {MATCHES} (contains: Flow-GRPO's rule, the target anywhere "
            f"in the reading scores 1; exact: every extra character costs); got {match!r}."
        )
    if spans not in SPANS:
        raise InputError(
            f"spans must be one of {SPANS} (first: the prompt's first quoted text, as "
            f"Flow-GRPO reads it; all: every quoted text, joined); got {spans!r}."
        )


def quoted_text(prompt: str, spans: str = "first") -> str:
    """The text ``prompt`` asks to be rendered: its first quoted span (``spans="first"``), or
    all of them, in order, joined by a space (``spans="all"``).

    Raises:
        PromptError: no quoted text, an unclosed quote, or a target of only whitespace.
        InputError: ``spans`` is not one of :data:`SPANS`.

    Example:
        >>> prompt = 'A mug that says "Good" and a plate that says “Morning”'
        >>> quoted_text(prompt), quoted_text(prompt, spans="all")
        ('Good', 'Good Morning')
    """
    check_ocr_rule(spans=spans)
    if not isinstance(prompt, str):
        raise PromptError(f"the prompt must be a string for the ocr reward; got {prompt!r}.")
    found = [straight or curly for straight, curly in _QUOTED.findall(prompt)]
    rest = _QUOTED.sub("", prompt)
    if any(mark in rest for mark in _QUOTE_MARKS):
        raise PromptError(
            f"unbalanced double quotes in {prompt[:80]!r}: the ocr reward reads the text "
            'between a pair of quotes ("..." or “...”); close every quote.'
        )
    if not found:
        raise PromptError(
            f"no quoted text in {prompt[:80]!r}: the ocr reward scores the text a prompt asks "
            "for in double quotes, e.g. 'A shop sign that says \"OPEN\"'."
        )
    text = found[0] if spans == "first" else " ".join(found)
    if not normalize_text(text):
        raise PromptError(f"the quoted text of {prompt[:80]!r} is empty; quote the text to render.")
    return text


def normalize_text(text: str) -> str:
    """``text`` as the reward compares it: NFKC, case-folded, every whitespace character removed.

    Example:
        >>> normalize_text("Straße\\n Ｃafé")
        'strassecafé'
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if not ch.isspace())


def edit_distance(a: str, b: str, cutoff: int | None = None) -> int:
    """The Levenshtein distance between ``a`` and ``b``: the fewest single-character
    insertions, deletions and substitutions that turn one into the other.

    With ``cutoff``, any distance of ``cutoff`` or more is returned as ``cutoff``, and the
    computation stops as soon as the distance is known to reach it (the reward clips there,
    so a long misreading costs no more than a short one).

    Example:
        >>> edit_distance("kitten", "sitting"), edit_distance("kitten", "sitting", cutoff=2)
        (3, 2)
    """
    if len(a) < len(b):
        a, b = b, a  # the shorter string spans the row
    if cutoff is not None and len(a) - len(b) >= cutoff:
        return cutoff  # that many insertions at least
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        # A row's minimum never decreases from one row to the next: once it reaches the
        # cutoff, so does the distance.
        if cutoff is not None and min(current) >= cutoff:
            return cutoff
        previous = current
    return previous[-1] if cutoff is None else min(previous[-1], cutoff)


def ocr_score(read: str, prompt: str, match: str = "contains", spans: str = "first") -> float:
    """The score of what an OCR model ``read`` for ``prompt``'s quoted text, both normalised
    (see the module docstring): ``1 - min(1, edit distance / target length)``, and 1.0 when
    the target appears anywhere in the reading under ``match="contains"`` (Flow-GRPO's rule).
    ``spans``: which quoted text is the target (:data:`SPANS`).

    Raises:
        PromptError: ``prompt`` has no quoted text (see :func:`quoted_text`).
        InputError: ``match`` or ``spans`` is not a known rule (:data:`MATCHES`, :data:`SPANS`).

    Example:
        >>> ocr_score("", 'A sign that says "OPEN"'), ocr_score("OPEN NOW", 'A sign: "open"')
        (0.0, 1.0)
        >>> ocr_score("OPEN NOW", 'A sign: "open"', match="exact")
        0.25
    """
    check_ocr_rule(match, spans)
    target = normalize_text(quoted_text(prompt, spans))
    reading = normalize_text(read)
    if match == "contains" and target in reading:
        return 1.0
    distance = edit_distance(reading, target, cutoff=len(target))
    return 1.0 - distance / len(target)
