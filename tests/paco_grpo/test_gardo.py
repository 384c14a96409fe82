"""GARDO's functions (paco_grpo/gardo.py) against a restatement of the released code
(tinnerhrhe/GARDO @ 1cc77fb: ``scripts/train_sd3_grpo_gardo.py``'s rank uncertainty,
``RiskCompensator``, gate and reset loop; ``flow_grpo/stat_tracking.py``'s ``gardo``
branch), written here from that code's semantics and not from paco_grpo's, plus the
autograd check that the KL's gradient reaches only the gated samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import rankdata

from paco_grpo.gardo import (
    KappaController,
    ReferenceResetRule,
    diversity_advantages,
    rank_uncertainty,
    uncertainty_gate,
)
from paco_grpo.grpo_loss import grpo_loss


# ---------------------------------------------------------------- the released code, restated
def released_ranks(values: np.ndarray) -> np.ndarray:
    """``_, idx = torch.sort(x, descending=True); ranks[idx] = arange(1, n + 1)``."""
    _, indices = torch.sort(torch.tensor(values), descending=True)
    ranks = torch.empty_like(torch.tensor(values)).long()
    ranks[indices] = torch.arange(1, len(values) + 1)
    return ranks.float().numpy()


def released_uncertainty(main, aesthetic, imagereward, ranker=released_ranks):
    """``reward_std = rank(main) - (rank(aesthetic) + rank(imagereward)) / 2``."""
    return ranker(main) - (ranker(aesthetic) + ranker(imagereward)) / 2


class ReleasedRiskCompensator:
    def __init__(self, base=0.1, beta=0.1):
        self.risk_buffer, self.base, self.alpha, self.beta = [], base, 0.1, beta
        self.beta_min, self.beta_max = 0.02, 0.2

    def update(self, pad_scores):
        if len(self.risk_buffer) == 0:
            self.beta = self.base
        elif np.mean(pad_scores) > max(self.risk_buffer):
            self.beta = self.beta * (1 + self.alpha)
        elif np.mean(pad_scores) < min(self.risk_buffer):
            self.beta = self.beta * (1 - self.alpha)
        self.beta = np.clip(self.beta, self.beta_min, self.beta_max)
        self.risk_buffer.append(np.mean(pad_scores))
        if len(self.risk_buffer) > 20:
            self.risk_buffer = self.risk_buffer[-20:]


def released_gate(reward_std: np.ndarray, controller: ReleasedRiskCompensator) -> np.ndarray:
    kept = np.array([p for p in reward_std if p >= 0])
    controller.update(kept)
    threshold = np.percentile(kept, 100 - controller.beta * 100)
    return reward_std > threshold


def released_reset_epochs(step_kls: list[list[float]], thres: float, reset_freq: int) -> list[int]:
    """The released loop: reset check at each epoch's start, ``reset`` set by a step's KL."""
    prev_epoch, reset, resets = 0, False, []
    for epoch, kls in enumerate(step_kls):
        if (epoch != 0 and reset is True) or (epoch - prev_epoch) > reset_freq:
            reset = False
            prev_epoch = epoch
            resets.append(epoch)
        for kl in kls:
            if kl > thres:
                reset = True
    return resets


def released_gardo_advantages(prompts, rewards, dists, clip=5.0):
    """``PerPromptStatTracker.update(type='gardo')`` on (n,) rewards, then ``torch.clamp``."""
    prompts = np.array(prompts)
    rewards = np.array(rewards, dtype=np.float64)[:, None]  # (n, T=1) as the released code
    dists = np.array(dists) / np.linalg.norm(dists, ord=2, axis=1, keepdims=True)
    advantages = np.empty_like(rewards) * 0.0
    for prompt in np.unique(prompts):
        prompt_rewards = rewards[prompts == prompt]
        mean = np.mean(prompt_rewards, axis=0, keepdims=True)
        prompt_dists = dists[prompts == prompt]
        distance_matrix = 1 - np.dot(prompt_dists, prompt_dists.T).clip(-1, 1)
        avg = np.zeros(len(distance_matrix))
        for i in range(len(distance_matrix)):
            mask = np.ones(len(distance_matrix), dtype=bool)
            mask[i] = False
            avg[i] = np.min(distance_matrix[i, mask])
        d = np.repeat(avg[:, None], prompt_rewards.shape[-1], axis=1)
        d = np.where((prompt_rewards - mean) < 0, np.ones_like(d), d / np.mean(d))
        advantages[prompts == prompt] = (prompt_rewards - mean) * d
    return torch.clamp(torch.tensor(advantages[:, 0]), -clip, clip).numpy()


# ---------------------------------------------------------------- tests
def test_the_sign_on_a_toy_batch_proxy_first_both_auxiliaries_last():
    n = 16
    rng = np.random.default_rng(0)
    rest = rng.uniform(0.1, 0.9, n - 1)
    proxy = np.r_[1.0, rest]  # sample 0 ranked first by the proxy ...
    aux = np.r_[0.0, rest + rng.normal(0, 0.1, n - 1)]  # ... and last by both auxiliaries
    released = released_uncertainty(proxy, aux, aux)
    assert released[0] == 1 - n  # the released value: negative, so never gated
    gate = released_gate(released, ReleasedRiskCompensator())
    assert not gate[0]
    ours = rank_uncertainty(proxy, [aux, aux])  # sign="paper": over-optimistic is positive
    assert ours[0] == n - 1
    assert uncertainty_gate(ours, KappaController())[0]
    np.testing.assert_array_equal(rank_uncertainty(proxy, [aux, aux], "released"), released)


def test_rank_uncertainty_equals_the_released_ranks_and_averages_ties():
    rng = np.random.default_rng(0)
    main, a, b = rng.random((3, 48))
    np.testing.assert_array_equal(
        rank_uncertainty(main, [a, b], "released"), released_uncertainty(main, a, b)
    )
    # ties (a reward that saturates): scipy's average rank of the descending order
    main, a, b = (np.round(rng.random(48), 1) for _ in range(3))

    def scipy_ranks(x):
        return rankdata(-x, method="average")

    expected = released_uncertainty(main, a, b, ranker=scipy_ranks)
    np.testing.assert_allclose(rank_uncertainty(main, [a, b], "released"), expected)
    np.testing.assert_allclose(rank_uncertainty(main, [a, b]), -expected)


def test_gate_and_kappa_follow_the_released_controller_on_a_series():
    rng = np.random.default_rng(1)
    ours, theirs = KappaController(), ReleasedRiskCompensator()
    kappas = []
    for epoch in range(70):
        # a rising then falling mean: kappa grows to its clip, then shrinks to the other
        loc = 10 + 2 * epoch if epoch < 25 else 58 - (epoch - 25)
        u = rng.normal(loc=loc, scale=2.0 if epoch % 3 else 20.0, size=96)
        expected = released_gate(u, theirs)
        np.testing.assert_array_equal(uncertainty_gate(u, ours), expected, err_msg=str(epoch))
        assert ours.kappa == pytest.approx(float(theirs.beta), rel=1e-12)
        kappas.append(ours.kappa)
    assert min(kappas) == pytest.approx(0.02) and max(kappas) == pytest.approx(0.2)
    assert len(ours.history) == 20
    # state round trip
    again = KappaController()
    again.load_state_dict(ours.state_dict())
    u = rng.normal(size=96)
    np.testing.assert_array_equal(uncertainty_gate(u, again), uncertainty_gate(u, ours))


def test_gate_with_no_non_negative_uncertainty_gates_nothing():
    c = KappaController()
    assert not uncertainty_gate(np.array([-1.0, -2.0, np.nan]), c).any()
    assert c.history == []


def test_reset_rule_follows_the_released_loop_on_a_kl_series():
    rng = np.random.default_rng(2)
    step_kls = [list(rng.exponential(1e-4, size=3)) for _ in range(80)]
    step_kls[5:30] = [[1e-5, 2e-5]] * 25  # a quiet stretch: only the 15-epoch rule resets
    expected = released_reset_epochs(step_kls, 3e-4, 15)
    rule = ReferenceResetRule(3e-4, 15)
    got = []
    for epoch, kls in enumerate(step_kls):
        if rule.should_reset(epoch):
            got.append(epoch)
        for kl in kls:
            rule.observe(kl)
    assert got == expected == rule.resets
    assert got[:2] == [16, 32]  # quiet: every 16 epochs (epoch - prev > 15), then KL marks


def test_diversity_advantage_equals_the_released_tracker_and_a_hand_computed_group():
    rng = np.random.default_rng(3)
    prompts = np.repeat(["a", "b", "c"], 8)
    rewards = rng.random(24) * 4
    feats = rng.normal(size=(24, 16))
    expected = released_gardo_advantages(prompts, rewards, feats)
    np.testing.assert_allclose(
        diversity_advantages(rewards, list(prompts), feats), expected, rtol=1e-12
    )
    # the clip at +-5 acts (large rewards)
    big = released_gardo_advantages(prompts, rewards * 10, feats)
    assert np.abs(big).max() == 5.0
    np.testing.assert_allclose(diversity_advantages(rewards * 10, list(prompts), feats), big)
    # by hand: one group, r = (3, 1, 2, 2) -> mean 2; features at 0, 60, 90, 180 degrees
    angles = np.radians([0, 60, 90, 180])
    f = np.stack([np.cos(angles), np.sin(angles)], 1)
    # min distances 1 - cos: 0.5 (0-60), 1 - cos30 (60-90), 1 - cos30, 1 - cos90 = 1
    d = np.array([0.5, 1 - np.cos(np.radians(30)), 1 - np.cos(np.radians(30)), 1.0])
    a = diversity_advantages(np.array([3.0, 1.0, 2.0, 2.0]), [0] * 4, f)
    np.testing.assert_allclose(a, [1 * d[0] / d.mean(), -1.0, 0.0, 0.0], rtol=1e-12)


def test_kl_gradient_flows_only_through_gated_samples():
    torch.manual_seed(0)
    n = 6
    mean = torch.randn(n, 4, 3, requires_grad=True)
    ref = torch.randn(n, 4, 3)
    std = torch.full((n, 1, 1), 0.3)
    log_prob = torch.zeros(n, requires_grad=True)
    gate = torch.tensor([True, False, False, True, False, False])
    out = grpo_loss(log_prob, torch.zeros(n), torch.randn(n), mean, ref, std, 0.2, 0.5, gate)
    out["loss"].backward()
    g = mean.grad.flatten(1).abs().sum(1)
    assert (g[gate] > 0).all() and (g[~gate] == 0).all()
    # the gradient is beta * d/dmean mean_{gated}(|mean - ref|^2 / (2 std^2)), by hand
    expected = torch.zeros_like(mean)
    expected[gate] = 0.5 * (mean[gate] - ref[gate]).detach() / (12 * 0.09) / gate.sum()
    torch.testing.assert_close(mean.grad, expected)
    kl_all = ((mean - ref) ** 2).mean(dim=(1, 2)) / (2 * 0.09)
    torch.testing.assert_close(out["kl"], kl_all.detach(), check_dtype=False)
    torch.testing.assert_close(out["kl_gated"].detach(), kl_all[gate].mean().detach())
    # no gated sample: no KL gradient at all
    mean.grad = None
    none = torch.zeros(n, dtype=torch.bool)
    grpo_loss(log_prob, torch.zeros(n), torch.randn(n), mean, ref, std, 0.2, 0.5, none)[
        "loss"
    ].backward()
    assert mean.grad is None or not mean.grad.any()
