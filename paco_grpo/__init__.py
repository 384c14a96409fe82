"""PaCo-GRPO: Flow-GRPO fine-tuning of diffusers generators for consistent image sets and edits.

The generators are those :mod:`paco_grpo.pipelines` registers, one file per model
(:data:`~paco_grpo.pipelines.PIPELINE_SPECS`; the recipe's ``pipeline:``), text-to-image and
editing alike; a LoRA on the transformer is what trains.

Modules: :mod:`paco_grpo.sde` (the SDE and CPS steps) and :mod:`paco_grpo.scheduling_flow_grpo`
(the same as a diffusers-style scheduler), :mod:`paco_grpo.timesteps` (the pipelines'
resolution-shifted schedules), :mod:`paco_grpo.advantages` (reward aggregation and group
advantages), :mod:`paco_grpo.rewards` (reward contract and registry),
:mod:`paco_grpo.pipelines` (the generators, one file per model, registered by name:
sampling with log-probabilities), :mod:`paco_grpo.policy` (pipeline + LoRA), :mod:`paco_grpo.rollout`
(an epoch's samples), :mod:`paco_grpo.grpo_loss`, :mod:`paco_grpo.evaluation`,
:mod:`paco_grpo.checkpointing`, :mod:`paco_grpo.tracking`, :mod:`paco_grpo.grpo_config`
and :mod:`paco_grpo.grpo_trainer` (the trainer), :mod:`paco_grpo.cli` (``paco-grpo``).
"""

from typing import TYPE_CHECKING

from paco_reward import __version__ as __version__  # the distribution's one version
from paco_reward.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from paco_grpo.advantages import AdvantageResult, compute_advantages
    from paco_grpo.grpo_config import GRPOConfig
    from paco_grpo.grpo_trainer import GRPOTrainer
    from paco_grpo.reward_failures import RewardFailureError
    from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler, FlowGRPOSchedulerOutput
    from paco_grpo.sde import cps_step, sde_step
    from paco_grpo.timesteps import FluxSchedule, flux_schedule, sd3_schedule

# name -> the module that defines it, imported when the name is first used: importing the
# package (``paco-grpo --help``) loads no torch.
_LAZY = {
    "AdvantageResult": "paco_grpo.advantages",
    "compute_advantages": "paco_grpo.advantages",
    "GRPOConfig": "paco_grpo.grpo_config",
    "GRPOTrainer": "paco_grpo.grpo_trainer",
    "RewardFailureError": "paco_grpo.reward_failures",
    "FlowGRPOScheduler": "paco_grpo.scheduling_flow_grpo",
    "FlowGRPOSchedulerOutput": "paco_grpo.scheduling_flow_grpo",
    "cps_step": "paco_grpo.sde",
    "sde_step": "paco_grpo.sde",
    "FluxSchedule": "paco_grpo.timesteps",
    "flux_schedule": "paco_grpo.timesteps",
    "sd3_schedule": "paco_grpo.timesteps",
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

__all__ = [
    "AdvantageResult",
    "FlowGRPOScheduler",
    "FlowGRPOSchedulerOutput",
    "FluxSchedule",
    "GRPOConfig",
    "GRPOTrainer",
    "RewardFailureError",
    "compute_advantages",
    "cps_step",
    "flux_schedule",
    "sd3_schedule",
    "sde_step",
]
