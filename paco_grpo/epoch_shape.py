"""The shape of a GRPO epoch on N processes, checked before anything heavy loads.

An epoch samples ``prompts_per_epoch`` x ``num_generations`` images. Like Flow-GRPO's
distributed k-repeat sampler, those images are dealt over the processes as one list, so a
prompt's group may span processes (advantages are computed on the gathered groups): the
only requirement is that the epoch's images split evenly over the processes. Each process
then trains its share in minibatches of ``per_device_train_batch_size``;
``gradient_accumulation_steps: auto`` makes one optimizer step of a whole pass over them
(the paper's setting), a number must divide the minibatches of a pass.

    >>> shape = EpochShape.plan(prompts_per_epoch=42, num_generations=16,
    ...                         per_device_train_batch_size=4, gradient_accumulation_steps="auto",
    ...                         num_iterations=1, num_processes=7)
    >>> shape.images_per_process, shape.gradient_accumulation_steps, shape.optimizer_steps_per_epoch
    (96, 24, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paco_reward.errors import PacoError

__all__ = ["EpochShape", "EpochShapeError", "allowed_process_counts", "check_sharding"]

AUTO = "auto"


class EpochShapeError(PacoError, ValueError):
    """A recipe's batch arithmetic cannot run on the launched number of processes."""


def allowed_process_counts(images_per_epoch: int, up_to: int = 64) -> list[int]:
    """Process counts (at most ``up_to``) over which ``images_per_epoch`` splits evenly.

    Example:
        >>> allowed_process_counts(42 * 16, up_to=16)
        [1, 2, 3, 4, 6, 7, 8, 12, 14, 16]
    """
    return [n for n in range(1, up_to + 1) if images_per_epoch % n == 0]


def check_sharding(sharded: bool, editing: bool, num_processes: int) -> None:
    """Refuse a sharded (FSDP) run of an editing pipeline on several processes.

    Under FSDP every forward gathers the weights from all processes, so every process must
    call the transformer the same number of times. Editing references keep their aspect
    ratio, so one process can sample more image sizes (more calls) than another and the run
    would hang. Text-to-image sets sample one size and shard fine.

    Example:
        >>> check_sharding(sharded=True, editing=False, num_processes=8)
    """
    if sharded and editing and num_processes > 1:
        raise EpochShapeError(
            "FSDP with an editing pipeline: processes sample references of different sizes, "
            "so they would call the sharded transformer a different number of times and hang. "
            "Launch editing recipes with data parallelism (recipes/accelerate/multi_gpu.yaml) "
            "and serve the rewards to make room."
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class EpochShape:
    """What each process does in one epoch.

    Attributes:
        num_processes: training processes.
        images_per_epoch: ``prompts_per_epoch * num_generations`` over all processes.
        images_per_process: this process's share (the same on every process).
        minibatches_per_pass: training minibatches per process in one pass over its share
            (for editing recipes, whose images differ in size, a lower bound: minibatches
            hold one size, and every process splits to the largest count of any process).
        gradient_accumulation_steps: minibatches per optimizer step.
        optimizer_steps_per_epoch: over ``num_iterations`` passes.
    """

    num_processes: int
    images_per_epoch: int
    images_per_process: int
    minibatches_per_pass: int
    gradient_accumulation_steps: int
    optimizer_steps_per_epoch: int

    @classmethod
    def plan(
        cls,
        *,
        prompts_per_epoch: int,
        num_generations: int,
        per_device_train_batch_size: int,
        gradient_accumulation_steps: int | str,
        num_iterations: int,
        num_processes: int,
    ) -> EpochShape:
        """The shape of an epoch, or :class:`EpochShapeError` naming the process counts the
        recipe allows and the accumulation it should have."""
        images = prompts_per_epoch * num_generations
        if images % num_processes:
            allowed = allowed_process_counts(images)
            raise EpochShapeError(
                f"{prompts_per_epoch} prompts x {num_generations} generations = {images} images "
                f"per epoch do not split evenly over {num_processes} processes. Launch with one "
                f"of {allowed} processes (accelerate launch --num_processes N), or change "
                "prompts_per_epoch / num_generations so that their product divides by "
                f"{num_processes}."
            )
        per_process = images // num_processes
        minibatches = math.ceil(per_process / per_device_train_batch_size)
        if gradient_accumulation_steps == AUTO:
            accumulation = minibatches
        else:
            accumulation = gradient_accumulation_steps
            if not isinstance(accumulation, int) or minibatches % accumulation:
                choices = _divisors(minibatches)
                raise EpochShapeError(
                    f"gradient_accumulation_steps={accumulation!r} does not divide the "
                    f"{minibatches} training minibatches each of {num_processes} processes runs "
                    f"per pass ({per_process} images / per_device_train_batch_size "
                    f"{per_device_train_batch_size}). Use 'auto' (one optimizer step per pass, "
                    f"here {minibatches}) or one of {choices}."
                )
        return cls(
            num_processes=num_processes,
            images_per_epoch=images,
            images_per_process=per_process,
            minibatches_per_pass=minibatches,
            gradient_accumulation_steps=accumulation,
            optimizer_steps_per_epoch=minibatches // accumulation * num_iterations,
        )

    @classmethod
    def from_config(cls, config, num_processes: int) -> EpochShape:
        """:meth:`plan` for a :class:`~paco_grpo.grpo_config.GRPOConfig`."""
        return cls.plan(
            prompts_per_epoch=config.prompts_per_epoch,
            num_generations=config.num_generations,
            per_device_train_batch_size=config.per_device_train_batch_size,
            gradient_accumulation_steps=config.gradient_accumulation_steps,
            num_iterations=config.num_iterations,
            num_processes=num_processes,
        )

    def describe(self) -> str:
        """One line for the start-up log."""
        return (
            f"{self.num_processes} process(es); {self.images_per_epoch} images per epoch, "
            f"{self.images_per_process} per process in {self.minibatches_per_pass} minibatches "
            f"per pass; gradient_accumulation_steps {self.gradient_accumulation_steps}; "
            f"{self.optimizer_steps_per_epoch} optimizer step(s) per epoch"
        )
