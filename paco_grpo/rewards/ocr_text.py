"""The text side of the ``ocr`` reward: the text a prompt asks for, how texts are compared,
and the score.

The score of an image is ``1 - min(1, d / len(target))``, where ``d`` is the Levenshtein
distance (unit cost for an inserted, deleted or substituted character) between the
normalised text the OCR model read and the normalised target: 1.0 for an exact reading, 0.0
when fixing the reading takes as many edits as the target has characters (or more). This is
Flow-GRPO's OCR reward; the choices it leaves open are fixed here:

- **The target** is the prompt's quoted text: every span between straight double quotes
  (``"..."``) or typographic ones (``“...”``), in order, joined by a space. Single quotes are
  not read (``don't`` would open one). A prompt with no quoted text, an unclosed quote, or
  quotes around nothing but spaces has no target: a :class:`~paco_reward.errors.PromptError`,
  so the item scores NaN with that reason (the prompt does not fit the reward).
- **Normalisation**, of both texts: Unicode NFKC (full-width and ligature forms become plain
  characters), then case folding (the reward is case-insensitive: ``"OPEN"`` read as ``Open``
  scores 1.0), then every whitespace character removed (OCR models break lines and space
  letters as they please; several quoted strings are compared as one run of characters).
  Punctuation, digits and accents are kept: they are part of the text asked for.
- **An empty reading** (the model read nothing) is a real outcome, not a failure: it is
  ``len(target)`` edits away, so it scores 0.0.

    >>> ocr_score("Open 24 / 7", 'A neon sign that says "OPEN 24/7"')
    1.0
    >>> ocr_score("OPFN", 'A sign that says "OPEN"')
    0.75
"""

from __future__ import annotations

import re
import unicodedata

from paco_reward.errors import PromptError

__all__ = ["edit_distance", "normalize_text", "ocr_score", "quoted_text"]

# A span between straight double quotes, or between typographic ones.
_QUOTED = re.compile(r'"([^"]*)"|“([^“”]*)”')
_QUOTE_MARKS = ('"', "“", "”")


def quoted_text(prompt: str) -> str:
    """The text ``prompt`` asks to be rendered: its quoted spans, in order, joined by a space.

    Raises:
        PromptError: no quoted text, an unclosed quote, or only whitespace between quotes.

    Example:
        >>> quoted_text('A mug that says "Good" and a plate that says “Morning”')
        'Good Morning'
    """
    if not isinstance(prompt, str):
        raise PromptError(f"the prompt must be a string for the ocr reward; got {prompt!r}.")
    spans = [straight or curly for straight, curly in _QUOTED.findall(prompt)]
    rest = _QUOTED.sub("", prompt)
    if any(mark in rest for mark in _QUOTE_MARKS):
        raise PromptError(
            f"unbalanced double quotes in {prompt[:80]!r}: the ocr reward reads the text "
            'between a pair of quotes ("..." or “...”); close every quote.'
        )
    if not spans:
        raise PromptError(
            f"no quoted text in {prompt[:80]!r}: the ocr reward scores the text a prompt asks "
            "for in double quotes, e.g. 'A shop sign that says \"OPEN\"'."
        )
    text = " ".join(spans)
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


def ocr_score(read: str, prompt: str) -> float:
    """``1 - min(1, edit distance / target length)`` between what an OCR model ``read`` and
    the quoted text of ``prompt``, both normalised (see the module docstring).

    Raises:
        PromptError: ``prompt`` has no quoted text (see :func:`quoted_text`).

    Example:
        >>> ocr_score("", 'A sign that says "OPEN"'), ocr_score("OPEN NOW", 'A sign: "open"')
        (0.0, 0.25)
    """
    target = normalize_text(quoted_text(prompt))
    distance = edit_distance(normalize_text(read), target, cutoff=len(target))
    return 1.0 - distance / len(target)
