"""paco_reward: the PaCo pairwise consistency evaluator (scoring, training, serving).

The scorer's names are imported on first use: importing a light module of the package
(``paco_reward.errors``, ``paco_reward.atomic_io``, as the data pipeline and its annotation
app do) must not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paco_reward.errors import (
    ArchitectureError,
    ConfigError,
    InputError,
    InputTypeError,
    InvalidImageError,
    LaunchError,
    LayoutError,
    LogprobTokenIdsIgnoredError,
    MissingDependencyError,
    OutputDirInUseError,
    PacoError,
    PathNotFoundError,
    PlanError,
    PromptError,
    RewardServerError,
    ServerOverloadedError,
    TransientError,
    UnsupportedModelError,
    UsageError,
    VisionAttentionError,
    WeightsMismatchError,
    YesNoTokenError,
)
from paco_reward.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from paco_reward.outputs import EditScore, Judgement, Ranking, SetScore
    from paco_reward.reward import PacoReward
    from paco_reward.templates import (
        TEMPLATES,
        build_messages,
        format_answer,
        render_instruction,
    )
    from paco_reward.yes_no import YesNoTokens, yes_probability

# The one place the version is written (setup.cfg reads it: ``attr: paco_reward.__version__``).
__version__ = "0.1.0"

# name -> the module that defines it, imported when the name is first used
_LAZY = {
    "EditScore": "paco_reward.outputs",
    "Judgement": "paco_reward.outputs",
    "Ranking": "paco_reward.outputs",
    "SetScore": "paco_reward.outputs",
    "PacoReward": "paco_reward.reward",
    "TEMPLATES": "paco_reward.templates",
    "build_messages": "paco_reward.templates",
    "format_answer": "paco_reward.templates",
    "render_instruction": "paco_reward.templates",
    "YesNoTokens": "paco_reward.yes_no",
    "yes_probability": "paco_reward.yes_no",
}


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = [
    "TEMPLATES",
    "ArchitectureError",
    "ConfigError",
    "EditScore",
    "InputError",
    "InputTypeError",
    "InvalidImageError",
    "Judgement",
    "LaunchError",
    "LayoutError",
    "LogprobTokenIdsIgnoredError",
    "MissingDependencyError",
    "OutputDirInUseError",
    "PacoError",
    "PacoReward",
    "PathNotFoundError",
    "PlanError",
    "PromptError",
    "Ranking",
    "RewardServerError",
    "ServerOverloadedError",
    "SetScore",
    "TransientError",
    "UnsupportedModelError",
    "UsageError",
    "VisionAttentionError",
    "WeightsMismatchError",
    "YesNoTokenError",
    "YesNoTokens",
    "build_messages",
    "format_answer",
    "render_instruction",
    "yes_probability",
]
