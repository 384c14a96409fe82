"""P(Yes)/(P(Yes)+P(No)) from top-k log-probabilities against the released reward, restated.

Source: ``PaCo-GRPO/paco_grpo/utils.py``, ``get_yes_cond_prob_from_completion``
(github.com/X-GenGroup/PaCo-RL), on the ``top_logprobs`` of the first completion token.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from paco_reward.yes_no import NO_VARIANTS, YES_VARIANTS, yes_probability_from_logprobs

DISTRACTORS = ("The", "Both", "Maybe", "N", "Ye", "Yeah", "Nope", " the", ".", "\n")


def released_yes_prob(top_logprobs: dict[str, float], canonicalize: bool) -> float:
    """The released function; returns 0.0 when neither word is present."""
    if not canonicalize:
        yes = top_logprobs.get("Yes", float("-inf"))
        no = top_logprobs.get("No", float("-inf"))
        if yes == float("-inf") and no == float("-inf"):
            return 0.0
        return float(1.0 / (1.0 + np.exp(no - yes)))
    tokens = np.array(list(top_logprobs))
    probs = np.exp(np.array(list(top_logprobs.values()), dtype=np.float64))
    stripped = np.array([t.strip().lower() for t in tokens])
    yes_sum, no_sum = probs[stripped == "yes"].sum(), probs[stripped == "no"].sum()
    total = yes_sum + no_sum
    return 0.0 if total == 0.0 else float(yes_sum / total)


def _top_k(rng: np.random.Generator, k: int) -> dict[str, float]:
    """A top-k map: k distinct tokens with log-probabilities of a normalised distribution."""
    vocab = list(YES_VARIANTS + NO_VARIANTS + DISTRACTORS)
    tokens = rng.choice(vocab, size=min(k, len(vocab)), replace=False)
    logits = rng.normal(0, 3, len(tokens))
    logprobs = logits - np.log(np.exp(logits).sum() + rng.uniform(0, 5))  # mass outside top-k
    return {str(t): float(lp) for t, lp in zip(tokens, logprobs)}


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("canonical", [False, True])
def test_score_equals_released_whenever_a_decision_word_is_present(seed, canonical):
    rng = np.random.default_rng(seed)
    compared = 0
    for _ in range(200):
        top = _top_k(rng, int(rng.integers(1, 21)))
        ours = yes_probability_from_logprobs(top, canonical_yes_no=canonical)
        released = released_yes_prob(top, canonicalize=canonical)
        words = YES_VARIANTS + NO_VARIANTS if canonical else ("Yes", "No")
        if any(t in words for t in top):
            assert ours == pytest.approx(released, rel=1e-9, abs=1e-12), top
            compared += 1
        else:
            # documented difference: the released code returns 0.0, we return NaN
            assert released == 0.0 and math.isnan(ours)
    assert compared > 50
