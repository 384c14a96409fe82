"""The score formula, checked against hand-computed probabilities."""

from __future__ import annotations

import math

import pytest
import torch

from paco_reward.errors import InputTypeError, LogprobTokenIdsIgnoredError
from paco_reward.yes_no import (
    YesNoTokens,
    yes_probability,
    yes_probability_from_logprobs,
    yes_probability_from_token_logprobs,
)


def test_yes_probability_sums_variants_over_the_full_distribution():
    logits = torch.tensor([[0.3, 2.0, -1.0, 1.0, 0.5], [5.0, -3.0, -3.0, -2.0, 4.0]])
    tokens = YesNoTokens(yes=(1, 2), no=(3,))
    p = torch.softmax(logits.double(), -1)
    expected = (p[:, 1] + p[:, 2]) / (p[:, 1] + p[:, 2] + p[:, 3])
    torch.testing.assert_close(
        yes_probability(logits, tokens=tokens).double(), expected, atol=1e-6, rtol=0
    )


def test_exact_tokens_reduce_to_sigmoid_of_logit_difference():
    logits = torch.tensor([0.0, 1.5, -0.25])
    got = yes_probability(logits, tokens=YesNoTokens(yes=(1,), no=(2,)))
    assert got.item() == pytest.approx(1 / (1 + math.exp(-(1.5 + 0.25))), abs=1e-6)


def test_tokens_from_tiny_tokenizer(tiny_reward):
    tok = tiny_reward.backend.tokenizer
    canonical = YesNoTokens.from_tokenizer(tok)
    exact = YesNoTokens.from_tokenizer(tok, canonical=False)
    assert exact.yes == (tok.convert_tokens_to_ids("Yes"),) and exact.no == (
        tok.convert_tokens_to_ids("No"),
    )
    assert len(canonical.yes) == 6 and len(canonical.no) == 6
    assert not set(canonical.yes) & set(canonical.no)


def test_yes_probability_needs_tokens_or_tokenizer():
    with pytest.raises(InputTypeError, match="needs a tokenizer"):
        yes_probability(torch.zeros(3))


def test_from_logprobs_matches_logit_formula():
    logprobs = {
        "Yes": math.log(0.5),
        " yes": math.log(0.1),
        "No": math.log(0.2),
        "maybe": math.log(0.2),
    }
    assert yes_probability_from_logprobs(logprobs) == pytest.approx(0.6 / 0.8)
    assert yes_probability_from_logprobs(logprobs, canonical_yes_no=False) == pytest.approx(
        0.5 / 0.7
    )
    assert yes_probability_from_logprobs({"Yes": -0.1}) == 1.0
    assert yes_probability_from_logprobs({"No": -0.1}) == 0.0


def test_from_logprobs_without_yes_or_no_is_nan_not_zero():
    assert math.isnan(yes_probability_from_logprobs({"maybe": -0.1, "The": -2.0}))


def test_token_logprobs_give_the_probability_ratio_and_refuse_a_partial_set():
    """From an id -> logprob map (what logprob_token_ids returns): the hand-computed ratio;
    a map missing a requested id raises instead of scoring a subset."""
    p = torch.softmax(torch.tensor([0.3, 2.0, -1.0, 1.0, 0.5], dtype=torch.float64), -1)
    logprobs = {i: float(v) for i, v in enumerate(p.log())}
    tokens = YesNoTokens(yes=(1, 2), no=(3, 4))
    expected = (p[1] + p[2]) / (p[1] + p[2] + p[3] + p[4])
    assert yes_probability_from_token_logprobs(logprobs, tokens) == pytest.approx(
        float(expected), abs=1e-12
    )
    del logprobs[4]
    with pytest.raises(LogprobTokenIdsIgnoredError, match=r"\[4\]"):
        yes_probability_from_token_logprobs(logprobs, tokens)


def test_ids_through_an_encoder_match_the_tokenizer(tiny_reward):
    """from_encoder (what the remote client feeds with a server's /tokenize) resolves the
    same ids as from_tokenizer."""
    tok = tiny_reward.backend.tokenizer
    for canonical in (True, False):
        via_encoder = YesNoTokens.from_encoder(
            lambda text: tok(text, add_special_tokens=False)["input_ids"],
            lambda ids: tok.decode(ids),
            canonical=canonical,
        )
        assert via_encoder == YesNoTokens.from_tokenizer(tok, canonical=canonical)
