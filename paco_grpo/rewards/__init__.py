"""Rewards for PaCo-GRPO: one contract, one registry.

A reward is a callable ``(images, prompts, metadata) -> np.ndarray`` of shape ``(n,)``:

- ``images``: n images (float CHW tensors in [0, 1] from the trainer, or anything
  :func:`paco_reward.images.load_image` accepts);
- ``prompts``: the n prompt texts;
- ``metadata``: n dicts from the prompt file (``layout``, ``theme``, ``criteria``,
  ``panel_prompts``, ``source_image``, ...).

A failed item is NaN (logged with its reason, counted in ``reward.num_failed``), never
0.0. Each built-in reward also has ``async acall(images, prompts, metadata)`` with the
same result (used by :mod:`paco_grpo.async_rewards` to score one sampling batch while the
next is sampled). Recipe names resolve to classes in :data:`REWARDS` through
:func:`build_reward` / :func:`build_rewards`; an unknown name raises listing the valid ones.

=========================  ===========================================================
name                       reward
=========================  ===========================================================
``consistency``            PaCo-Reward over all panel pairs of a grid (theme or criteria)
``t2is_consistency``       T2IS-Bench's consistency protocol (its question per criterion)
``clip_t``                 CLIP similarity of each panel with its own description
``pickscore``              PickScore of the grid with its prompt, / 26
``clip_i``                 mean pairwise CLIP image similarity of the panels
``edit_consistency``       sqrt(SC * PF) of an edit with PaCo-Reward (source first)
``ocr``                    1 - edit distance of the quoted text and an OCR reading
``panel_colour_agreement`` agreement of the panels' mean colours (cheap, for tests)
=========================  ===========================================================

    >>> import torch
    >>> reward = build_reward("panel_colour_agreement")
    >>> reward([torch.full((3, 32, 32), 0.5)], ["a grid, 2x2"], [{}]).round(3)
    array([1.])
"""

from paco_grpo.rewards.base import BaseReward, Reward, acall_reward, check_scores
from paco_grpo.rewards.clip import CLIPEncoder, CLIPImageReward, CLIPTextReward, PickScoreReward
from paco_grpo.rewards.colour import PanelColourAgreementReward
from paco_grpo.rewards.consistency import (
    ConsistencyReward,
    EditConsistencyReward,
    T2ISConsistencyReward,
    load_paco_reward,
)
from paco_grpo.rewards.ocr import OCRReader, OCRReward
from paco_grpo.rewards.registry import REWARDS, RewardLoadError, build_reward, build_rewards

__all__ = [
    "REWARDS",
    "BaseReward",
    "CLIPEncoder",
    "CLIPImageReward",
    "CLIPTextReward",
    "ConsistencyReward",
    "EditConsistencyReward",
    "OCRReader",
    "OCRReward",
    "PanelColourAgreementReward",
    "PickScoreReward",
    "Reward",
    "RewardLoadError",
    "T2ISConsistencyReward",
    "acall_reward",
    "build_reward",
    "build_rewards",
    "check_scores",
    "load_paco_reward",
]
