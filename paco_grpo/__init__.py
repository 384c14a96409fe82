"""PaCo-GRPO: Flow-GRPO fine-tuning of FLUX / Qwen-Image for consistent image sets and edits.

Modules: :mod:`paco_grpo.sde` (the SDE and CPS steps) and :mod:`paco_grpo.scheduling_flow_grpo`
(the same as a diffusers-style scheduler), :mod:`paco_grpo.timesteps` (FLUX's
resolution-shifted schedule), :mod:`paco_grpo.advantages` (reward aggregation and group
advantages), :mod:`paco_grpo.rewards` (reward contract and registry),
:mod:`paco_grpo.pipelines` (the generators, one file per model, registered by name:
sampling with log-probabilities), :mod:`paco_grpo.policy` (pipeline + LoRA), :mod:`paco_grpo.rollout`
(an epoch's samples), :mod:`paco_grpo.grpo_loss`, :mod:`paco_grpo.evaluation`,
:mod:`paco_grpo.checkpointing`, :mod:`paco_grpo.tracking`, :mod:`paco_grpo.grpo_config`
and :mod:`paco_grpo.grpo_trainer` (the trainer), :mod:`paco_grpo.cli` (``paco-grpo``).
"""

from paco_grpo.advantages import AdvantageResult, compute_advantages
from paco_grpo.grpo_config import GRPOConfig
from paco_grpo.grpo_trainer import GRPOTrainer
from paco_grpo.reward_failures import RewardFailureError
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler, FlowGRPOSchedulerOutput
from paco_grpo.sde import cps_step, sde_step
from paco_grpo.timesteps import FluxSchedule, flux_schedule, sd3_schedule
from paco_reward import __version__ as __version__  # the distribution's one version

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
