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

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from paco_reward.errors import InputTypeError, LogprobTokenIdsIgnoredError, YesNoTokenError

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
        return cls.from_encoder(
            lambda text: tokenizer.encode(text, add_special_tokens=False),
            tokenizer.decode,
            canonical=canonical,
            unk_token_id=tokenizer.unk_token_id,
            name=f"Tokenizer {type(tokenizer).__name__} "
            f"({getattr(tokenizer, 'name_or_path', '?')!r})",
        )

    @classmethod
    def from_encoder(
        cls,
        encode: Callable[[str], Sequence[int]],
        decode: Callable[[Sequence[int]], str],
        canonical: bool = True,
        unk_token_id: int | None = None,
        name: str = "The tokenizer",
    ) -> YesNoTokens:
        """Resolve the ids through any ``encode``/``decode`` pair (a tokenizer's, or a
        server's ``/tokenize`` and ``/detokenize``): a variant counts when it encodes to one
        token that decodes back to the word (not an unknown-token fallback).

        Example:
            >>> YesNoTokens.from_encoder(tokenizer.encode, tokenizer.decode)  # doctest: +SKIP
        """
        encoded = {word: list(encode(word)) for word in {*YES_VARIANTS, *NO_VARIANTS}}

        def single_ids(words: tuple[str, ...]) -> tuple[int, ...]:
            ids: list[int] = []
            for word in words:
                tokens = encoded[word]
                if (
                    len(tokens) == 1
                    and tokens[0] not in ids
                    and tokens[0] != unk_token_id
                    and decode(tokens).strip() == word.strip()
                ):
                    ids.append(tokens[0])
            return tuple(ids)

        exact_yes, exact_no = single_ids(("Yes",)), single_ids(("No",))
        if not exact_yes or not exact_no:
            raise YesNoTokenError(
                f"{name} does not encode 'Yes' and 'No' as single tokens (got "
                f"{encoded['Yes']} and {encoded['No']}); a PaCo evaluator needs both."
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
            raise InputTypeError(
                "yes_probability needs a tokenizer or pre-resolved tokens=YesNoTokens(...)."
            )
        tokens = YesNoTokens.from_tokenizer(tokenizer, canonical=canonical_yes_no)
    logits = logits.float()
    yes = torch.logsumexp(logits[..., _token_index(tokens.yes, logits.device)], dim=-1)
    no = torch.logsumexp(logits[..., _token_index(tokens.no, logits.device)], dim=-1)
    return yes_no_log_odds_to_probability(yes - no)


@functools.lru_cache(maxsize=64)
def _token_index(ids: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """``ids`` as an index tensor on ``device``, made once: indexing a device tensor with a
    list copies the list there, and waits for the copy, at every call."""
    return torch.tensor(ids, dtype=torch.long).to(device)


def yes_no_words(canonical_yes_no: bool = True) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The token texts that count as yes and as no: every case/space variant, or only
    "Yes"/"No"."""
    if canonical_yes_no:
        return YES_VARIANTS, NO_VARIANTS
    return ("Yes",), ("No",)


def yes_probability_from_logprobs(
    logprobs: Mapping[str, float], canonical_yes_no: bool = True
) -> float:
    """The same score from a ``{token text: log-probability}`` map (an OpenAI-style
    ``top_logprobs`` entry). Returns NaN when no yes/no variant is present: the caller
    must treat that as a failed score, never as 0 (the released PaCo-GRPO reward returns
    0.0 there). The variants are the twelve in :data:`YES_VARIANTS` / :data:`NO_VARIANTS`;
    the released ``canonicalize=True`` also counts any other token whose stripped,
    lower-cased text is "yes"/"no" (e.g. ``"Yes\n"``)."""
    yes_words, no_words = yes_no_words(canonical_yes_no)
    yes = [lp for tok, lp in logprobs.items() if tok in yes_words]
    no = [lp for tok, lp in logprobs.items() if tok in no_words]
    if not yes and not no:
        return math.nan
    yes_lse = torch.logsumexp(torch.tensor(yes, dtype=torch.float64), 0) if yes else -math.inf
    no_lse = torch.logsumexp(torch.tensor(no, dtype=torch.float64), 0) if no else -math.inf
    return float(yes_no_log_odds_to_probability(torch.as_tensor(yes_lse - no_lse)))


def yes_probability_from_token_logprobs(
    logprobs: Mapping[int, float], tokens: YesNoTokens
) -> float:
    """The same score from a ``{token id: log-probability}`` map holding (at least) every id
    of ``tokens`` (what ``logprob_token_ids`` returns). Raises
    :class:`~paco_reward.errors.LogprobTokenIdsIgnoredError` naming the ids that are missing:
    a partial set of variants would be a silently different score.

    >>> tokens = YesNoTokens(yes=(1,), no=(2,))
    >>> round(yes_probability_from_token_logprobs({1: -0.1, 2: -2.4, 7: -3.0}, tokens), 4)
    0.9089
    """
    missing = [i for i in (*tokens.yes, *tokens.no) if i not in logprobs]
    if missing:
        raise LogprobTokenIdsIgnoredError(f"no log-probability for the yes/no token ids {missing}")

    def lse(ids: tuple[int, ...]) -> torch.Tensor:
        return torch.logsumexp(torch.tensor([logprobs[i] for i in ids], dtype=torch.float64), 0)

    return float(yes_no_log_odds_to_probability(lse(tokens.yes) - lse(tokens.no)))
