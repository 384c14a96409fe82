"""Recipe names -> reward classes: the one registry (names resolve here, at the edge).

Devices: :func:`build_rewards` takes the process's device (the trainer passes
``accelerator.device``, e.g. ``cuda:3`` on rank 3) and gives it to every reward whose
constructor has a ``device`` parameter (the rewards that hold a model: ``clip_t``,
``pickscore``, ``clip_i``, ``consistency``, ``edit_consistency``, ``ocr``, and any registered class
that names ``device``); rewards without a model (``panel_colour_agreement``) are built
without it. A ``device`` in a reward's own ``reward_kwargs`` wins over the process's (to
put a large evaluator on a GPU of its own); a bare ``"cuda"`` there still means this
process's GPU (:func:`paco_reward.devices.resolve_device`).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from paco_grpo.rewards.base import Reward
from paco_grpo.rewards.clip import CLIPImageReward, CLIPTextReward, PickScoreReward
from paco_grpo.rewards.colour import PanelColourAgreementReward
from paco_grpo.rewards.consistency import (
    ConsistencyReward,
    EditConsistencyReward,
    T2ISConsistencyReward,
)
from paco_grpo.rewards.ocr import OCRReward
from paco_reward.errors import ConfigError, InputTypeError, PacoError, PathNotFoundError

if TYPE_CHECKING:
    import torch

__all__ = ["REWARDS", "RewardLoadError", "build_reward", "build_rewards"]


class RewardLoadError(PacoError, ValueError):
    """A reward could not be built from its recipe arguments (model not found, bad keyword)."""


REWARDS: dict[str, type] = {
    "consistency": ConsistencyReward,
    "t2is_consistency": T2ISConsistencyReward,
    "clip_t": CLIPTextReward,
    "pickscore": PickScoreReward,
    "clip_i": CLIPImageReward,
    "edit_consistency": EditConsistencyReward,
    "ocr": OCRReward,
    "panel_colour_agreement": PanelColourAgreementReward,
}
"""The built-in rewards by recipe name (the keys of a recipe's ``rewards``);
:func:`build_reward` builds one from its name and keyword arguments."""


def _takes_device(reward_class: type) -> bool:
    """Whether ``reward_class(...)`` has a ``device`` parameter that can be given by keyword
    (a ``**kwargs`` catch-all does not count: it may forward to something that has none).

    Example:
        >>> _takes_device(REWARDS["clip_t"]), _takes_device(REWARDS["panel_colour_agreement"])
        (True, False)
    """
    try:
        parameter = inspect.signature(reward_class).parameters.get("device")
    except (TypeError, ValueError):  # no signature to read (a builtin): pass nothing
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def build_reward(name: str, device: str | torch.device | None = None, **kwargs: Any) -> Reward:
    """Instantiate the reward registered as ``name`` with ``kwargs``.

    Args:
        name: a key of :data:`REWARDS`.
        device: the device for a reward that holds a model, passed to the reward only when
            its constructor names a ``device`` parameter (a ``**kwargs`` catch-all does not
            count) and ignored otherwise, so the process's device can be given to any
            reward. ``None`` (default): the reward's own default, this process's device.
        **kwargs: the reward's constructor arguments.

    Raises:
        ConfigError: unknown name (the message lists the valid names).
        RewardLoadError: the reward's model cannot be loaded, or a keyword is unknown.
        RewardServerError: a server-backed reward's server is down or does not serve the model.

    Example:
        >>> build_reward("panel_colour_agreement", layout="1x2").layout
        '1x2'
        >>> build_reward("panel_colour_agreement", device="cuda:1").name  # no model: ignored
        'panel_colour_agreement'
        >>> build_reward("clip_t", model="clip-folder", device="cuda:1").device  # doctest: +SKIP
        device(type='cuda', index=1)
    """
    if name not in REWARDS:
        raise ConfigError(f"Unknown reward {name!r}; valid rewards: {sorted(REWARDS)}.")
    if device is not None and _takes_device(REWARDS[name]):
        kwargs["device"] = device
    try:
        return REWARDS[name](**kwargs)
    except (OSError, TypeError) as err:
        if isinstance(err, PacoError) and not isinstance(err, (PathNotFoundError, InputTypeError)):
            raise  # a server that is down names itself (RewardServerError)
        if isinstance(err, OSError):  # a model folder / hub id that cannot be loaded
            raise RewardLoadError(
                f"reward {name!r} could not load its model with arguments {kwargs}: {err} "
                f"Point reward_kwargs.{name}.model at a local folder or a reachable hub id."
            ) from err
        raise RewardLoadError(  # a misspelt keyword
            f"reward {name!r} does not accept the arguments {sorted(kwargs)} ({err}); see "
            f"help({REWARDS[name].__name__}) for its arguments."
        ) from err


def build_rewards(
    weights: dict[str, float],
    reward_kwargs: dict[str, dict] | None = None,
    device: str | torch.device | None = None,
) -> dict[str, Reward]:
    """``{name: reward}`` for every name in ``weights``, built at once (so a model that cannot
    load, or a reward server that does not serve the model, fails at start-up). Every name is
    checked before anything loads.

    Args:
        weights: ``{name: weight}``; the names to build.
        reward_kwargs: ``{name: {argument: value}}``, each reward's constructor arguments.
        device: this process's device (the trainer passes ``accelerator.device``), given to
            every reward whose constructor has a ``device`` parameter. A ``device`` in a
            reward's ``reward_kwargs`` wins over it (only for a reward that takes one: given
            to a reward without a model it raises ``RewardLoadError``). ``None``: each
            reward's default, this process's device.

    Example:
        >>> sorted(build_rewards({"panel_colour_agreement": 1.0}))
        ['panel_colour_agreement']
        >>> rewards = build_rewards(                                       # doctest: +SKIP
        ...     {"clip_t": 1.0, "consistency": 1.0},
        ...     {"consistency": {"device": "cuda:7"}},    # the evaluator on a GPU of its own
        ...     device=accelerator.device,               # clip_t on this process's GPU
        ... )
    """
    reward_kwargs = reward_kwargs or {}
    unknown = sorted(set(weights) - set(REWARDS))
    if unknown:
        raise ConfigError(f"Unknown reward(s) {unknown}; valid rewards: {sorted(REWARDS)}.")
    bad = {n: kw for n, kw in reward_kwargs.items() if not isinstance(kw, dict)}
    if bad:
        raise ConfigError(
            f"reward_kwargs values must be mappings of constructor arguments; got {bad}."
        )
    misplaced = sorted(
        n for n in weights if "device" in reward_kwargs.get(n, {}) and not _takes_device(REWARDS[n])
    )
    if misplaced:
        raise RewardLoadError(
            f"reward_kwargs of {misplaced} set a device, but these rewards hold no model and "
            "take no device; remove reward_kwargs.<name>.device for them."
        )
    rewards = {}
    for name in weights:
        kwargs = dict(reward_kwargs.get(name, {}))
        rewards[name] = build_reward(name, device=kwargs.pop("device", device), **kwargs)
    return rewards
