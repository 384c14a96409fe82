"""Recipe names -> reward classes: the one registry (names resolve here, at the edge)."""

from __future__ import annotations

from typing import Any

from paco_grpo.rewards.base import Reward
from paco_grpo.rewards.clip import CLIPImageReward, CLIPTextReward, PickScoreReward
from paco_grpo.rewards.colour import PanelColourAgreementReward
from paco_grpo.rewards.consistency import ConsistencyReward, EditConsistencyReward
from paco_reward.errors import PacoError

__all__ = ["REWARDS", "RewardLoadError", "build_reward", "build_rewards"]


class RewardLoadError(PacoError, ValueError):
    """A reward could not be built from its recipe arguments (model not found, bad keyword)."""


REWARDS: dict[str, type] = {
    "consistency": ConsistencyReward,
    "clip_t": CLIPTextReward,
    "pickscore": PickScoreReward,
    "clip_i": CLIPImageReward,
    "edit_consistency": EditConsistencyReward,
    "panel_colour_agreement": PanelColourAgreementReward,
}


def build_reward(name: str, **kwargs: Any) -> Reward:
    """Instantiate the reward registered as ``name`` with ``kwargs``.

    Raises:
        ValueError: unknown name (the message lists the valid names).
        RewardLoadError: the reward's model cannot be loaded, or a keyword is unknown.
        RewardServerError: a server-backed reward's server is down or does not serve the model.

    Example:
        >>> build_reward("panel_colour_agreement", layout="1x2").layout
        '1x2'
    """
    if name not in REWARDS:
        raise ValueError(f"Unknown reward {name!r}; valid rewards: {sorted(REWARDS)}.")
    try:
        return REWARDS[name](**kwargs)
    except PacoError:
        raise
    except OSError as err:  # a model folder / hub id that cannot be loaded
        raise RewardLoadError(
            f"reward {name!r} could not load its model with arguments {kwargs}: {err} "
            f"Point reward_kwargs.{name}.model at a local folder or a reachable hub id."
        ) from err
    except TypeError as err:  # a misspelt keyword
        raise RewardLoadError(
            f"reward {name!r} does not accept the arguments {sorted(kwargs)} ({err}); see "
            f"help({REWARDS[name].__name__}) for its arguments."
        ) from err


def build_rewards(
    weights: dict[str, float], reward_kwargs: dict[str, dict] | None = None
) -> dict[str, Reward]:
    """``{name: reward}`` for every name in ``weights``, built at once (so a model that cannot
    load, or a reward server that does not serve the model, fails at start-up). Every name is
    checked before anything loads.

    Example:
        >>> sorted(build_rewards({"panel_colour_agreement": 1.0}))
        ['panel_colour_agreement']
    """
    reward_kwargs = reward_kwargs or {}
    unknown = sorted(set(weights) - set(REWARDS))
    if unknown:
        raise ValueError(f"Unknown reward(s) {unknown}; valid rewards: {sorted(REWARDS)}.")
    bad = {n: kw for n, kw in reward_kwargs.items() if not isinstance(kw, dict)}
    if bad:
        raise ValueError(
            f"reward_kwargs values must be mappings of constructor arguments; got {bad}."
        )
    return {name: build_reward(name, **reward_kwargs.get(name, {})) for name in weights}
