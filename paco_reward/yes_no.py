"""The score: P(Yes) / (P(Yes) + P(No)) of the first answer token.

This module is the only place the score is computed, for every backend:

* in-process: :func:`yes_probability` on the full next-token logits (no top-k
  truncation), summing every single-token case/space variant of yes/no;
* remote: :func:`yes_probability_from_logprobs` on the token → log-probability
  map a chat-completions server returns.

Both reduce to ``sigmoid(logsumexp(yes) - logsumexp(no))``, which equals
ΣP(yes variants) / (ΣP(yes variants) + ΣP(no variants)) and is exact in float32.

    >>> import torch
    >>> yes_no_log_odds_to_probability(torch.tensor(0.0)).item()
    0.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from paco_reward.errors import YesNoTokenError

YES_VARIANTS = ("Yes", "yes", "YES", " Yes", " yes", " YES")
NO_VARIANTS = ("No", "no", "NO", " No", " no", " NO")


@dataclass(frozen=True)
class YesNoTokens:
    """Vocabulary ids of the decision words. ``yes``/``no`` hold every single-token variant
    (or only the exact "Yes"/"No" ids when ``canonical=False``)."""

    yes: tuple[int, ...]
    no: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer, canonical: bool = True) -> YesNoTokens:
        """Resolve the ids. Raises :class:`YesNoTokenError` if "Yes" or "No" is not one token."""

        def single_ids(words: tuple[str, ...]) -> tuple[int, ...]:
            ids: list[int] = []
            for word in words:
                encoded = tokenizer.encode(word, add_special_tokens=False)
                # A single token only counts if it *is* the word (not an unknown-token fallback).
                if (
                    len(encoded) == 1
                    and encoded[0] not in ids
                    and encoded[0] != tokenizer.unk_token_id
                    and tokenizer.decode(encoded).strip() == word.strip()
                ):
                    ids.append(encoded[0])
            return tuple(ids)

        exact_yes, exact_no = single_ids(("Yes",)), single_ids(("No",))
        if not exact_yes or not exact_no:
            raise YesNoTokenError(
                f"Tokenizer {type(tokenizer).__name__} ({getattr(tokenizer, 'name_or_path', '?')!r}) "
                f"does not encode 'Yes' and 'No' as single tokens (got "
                f"{tokenizer.encode('Yes', add_special_tokens=False)} and "
                f"{tokenizer.encode('No', add_special_tokens=False)}); a PaCo evaluator needs both."
            )
        if not canonical:
            return cls(exact_yes, exact_no)
        return cls(single_ids(YES_VARIANTS), single_ids(NO_VARIANTS))


def yes_no_log_odds_to_probability(log_odds: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(log_odds)


def yes_probability(
    logits: torch.Tensor,
    tokenizer=None,
    *,
    tokens: YesNoTokens | None = None,
    canonical_yes_no: bool = True,
) -> torch.Tensor:
    """P(Yes) / (P(Yes) + P(No)) from next-token logits of shape ``[..., vocab]``.

    Args:
        logits: first-answer-token logits; any leading batch shape.
        tokenizer: used to find the Yes/No ids when ``tokens`` is not given.
        tokens: pre-resolved ids (pass them in hot loops).
        canonical_yes_no: sum all case/space variants (default) or use only "Yes"/"No".

    Returns:
        A float32 tensor of shape ``logits.shape[:-1]``.

    Example:
        >>> scores = yes_probability(outputs.logits[:, -1], processor.tokenizer)  # doctest: +SKIP
    """
    if tokens is None:
        if tokenizer is None:
            raise TypeError(
                "yes_probability needs a tokenizer or pre-resolved tokens=YesNoTokens(...)."
            )
        tokens = YesNoTokens.from_tokenizer(tokenizer, canonical=canonical_yes_no)
    logits = logits.float()
    yes = torch.logsumexp(logits[..., list(tokens.yes)], dim=-1)
    no = torch.logsumexp(logits[..., list(tokens.no)], dim=-1)
    return yes_no_log_odds_to_probability(yes - no)


def yes_probability_from_logprobs(
    logprobs: Mapping[str, float], canonical_yes_no: bool = True
) -> float:
    """The same score from a ``{token text: log-probability}`` map (an OpenAI-style
    ``top_logprobs`` entry). Returns NaN when no yes/no variant is present: the caller
    must treat that as a failed score, never as 0 (the released PaCo-GRPO reward returns
    0.0 there). The variants are the twelve in :data:`YES_VARIANTS` / :data:`NO_VARIANTS`;
    the released ``canonicalize=True`` also counts any other token whose stripped,
    lower-cased text is "yes"/"no" (e.g. ``"Yes\n"``)."""
    yes_words = YES_VARIANTS if canonical_yes_no else ("Yes",)
    no_words = NO_VARIANTS if canonical_yes_no else ("No",)
    yes = [lp for tok, lp in logprobs.items() if tok in yes_words]
    no = [lp for tok, lp in logprobs.items() if tok in no_words]
    if not yes and not no:
        return math.nan
    yes_lse = torch.logsumexp(torch.tensor(yes, dtype=torch.float64), 0) if yes else -math.inf
    no_lse = torch.logsumexp(torch.tensor(no, dtype=torch.float64), 0) if no else -math.inf
    return float(yes_no_log_odds_to_probability(torch.as_tensor(yes_lse - no_lse)))
