"""paco_reward: the PaCo pairwise consistency evaluator (scoring, training, serving)."""

from paco_reward.errors import (
    InvalidImageError,
    LayoutError,
    LogprobTokenIdsIgnoredError,
    PacoError,
    PromptError,
    RewardServerError,
    YesNoTokenError,
)
from paco_reward.outputs import EditScore, Judgement, Ranking, SetScore
from paco_reward.reward import PacoReward
from paco_reward.templates import TEMPLATES, build_messages, format_answer, render_instruction
from paco_reward.yes_no import YesNoTokens, yes_probability

__version__ = "0.1.0"

__all__ = [
    "TEMPLATES",
    "EditScore",
    "InvalidImageError",
    "Judgement",
    "LayoutError",
    "LogprobTokenIdsIgnoredError",
    "PacoError",
    "PacoReward",
    "PromptError",
    "Ranking",
    "RewardServerError",
    "SetScore",
    "YesNoTokenError",
    "YesNoTokens",
    "build_messages",
    "format_answer",
    "render_instruction",
    "yes_probability",
]
