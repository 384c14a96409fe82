"""What every policy sampler shares: the trainer's interface (:class:`GRPOSampler`), the
sampled batch (:class:`SampleOutput`), the input checks and the denoising loop with the
Flow-GRPO SDE step at the noise steps (:func:`sde_denoise`).

A sampler runs on a diffusers pipeline's components and reads like that pipeline's
``__call__`` (check inputs -> encode prompt -> prepare latents -> timesteps -> denoising
loop -> decode); its model file (``paco_grpo/pipelines/<model>.py``) holds what is
particular to the model: prompt encoding, latent packing, the transformer call, decoding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import FluxSchedule
from paco_reward.errors import InputError

logger = logging.getLogger(__name__)

__all__ = ["GRPOSampler", "SampleOutput", "check_sampling_inputs", "sde_denoise"]


@dataclass
class SampleOutput:
    """One sampled batch.

    Attributes:
        images: ``(B, 3, H, W)`` float in [0, 1] (``None`` with ``output_type="latent"``).
        latents: final packed latents ``(B, seq, C)`` (SD3's are unpacked, ``(B, C, h, w)``;
            the shapes below follow them).
        noise_latents: ``(B, S, seq, C)`` latents entering each of the ``S`` noise steps.
        noise_next_latents: ``(B, S, seq, C)`` latents the SDE produced at those steps.
        log_probs: ``(B, S)`` behaviour-policy log-probabilities of those transitions.
        noise_steps: the step indices ``S`` refers to.
        schedule: the timesteps/sigmas used.
    """

    images: torch.Tensor | None
    latents: torch.Tensor
    noise_latents: torch.Tensor
    noise_next_latents: torch.Tensor
    log_probs: torch.Tensor
    noise_steps: list[int]
    schedule: FluxSchedule


class GRPOSampler:
    """What the trainer calls on a policy sampler; every registered sampler derives from it.

    - ``sampler(prompts, height=, width=, ...)`` (text-to-image) or
      ``sampler(prompts, images, area=, ...)`` (editing) samples a batch with SDE steps at
      ``noise_steps`` and returns a :class:`SampleOutput`;
    - :meth:`transition_velocity` is the policy's velocity at recorded latents, conditioned
      as sampling conditioned them: what the GRPO update re-scores;
    - :attr:`size_multiple`: image sides must be multiples of it.

    Args:
        pipe: the diffusers pipeline (its transformer may carry a peft LoRA; pass the
            wrapped module as ``transformer=`` to the calls).
        max_sequence_length: text tokens per prompt.
    """

    def __init__(self, pipe, max_sequence_length: int = 512) -> None:
        self.pipe = pipe
        self.max_sequence_length = max_sequence_length

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent pixel of the pipeline's VAE."""
        return self.pipe.vae_scale_factor

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of this (VAE factor times the 2x2 latent packing)."""
        return self.vae_scale_factor * 2

    def clear_cache(self) -> None:
        """Forget the cached prompt (and reference) encodings."""

    def transition_velocity(
        self,
        transformer,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        prompts: Sequence[str],
        height: int,
        width: int,
        guidance_scale: float,
        references: Sequence | None = None,
    ) -> torch.Tensor:
        """The (guided) velocity of ``transformer`` at recorded packed ``latents``.

        Args:
            transformer: the (possibly LoRA-wrapped) transformer.
            latents: packed latents ``(B, seq, C)`` recorded by a sampling call.
            timestep: in [0, 1000], one value or one per sample.
            prompts: the ``B`` prompts they were sampled for.
            height / width: the images' size in pixels.
            guidance_scale: as given to the sampling call.
            references: editing samplers: the ``B`` (already resized) reference images.
        """
        raise NotImplementedError


def decode_scaled_latents(pipe, latents: torch.Tensor) -> torch.Tensor:
    """Unpacked VAE latents -> images ``(B, 3, H, W)`` in [0, 1], undoing the VAE's
    ``scaling_factor`` and ``shift_factor`` as FLUX's and Stable Diffusion 3's pipelines do."""
    vae = pipe.vae
    latents = (latents / vae.config.scaling_factor) + vae.config.shift_factor
    image = vae.decode(latents.to(vae.dtype), return_dict=False)[0]
    return pipe.image_processor.postprocess(image, output_type="pt")


def check_sampling_inputs(
    height: int,
    width: int,
    multiple: int,
    num_steps: int,
    noise_steps: Sequence[int],
    output_type: str,
) -> list[int]:
    """Validate a sampler call's size, noise steps and output type; returns the sorted
    distinct ``noise_steps``.

    Example:
        >>> check_sampling_inputs(64, 96, 16, 4, [2, 1, 2], "pt")
        [1, 2]
    """
    if height % multiple or width % multiple:
        raise InputError(f"height and width must be multiples of {multiple}; got {height}x{width}.")
    steps = sorted(set(int(s) for s in noise_steps))
    if any(s < 0 or s >= num_steps for s in steps):
        raise InputError(f"noise_steps {steps} must lie in [0, {num_steps - 1}].")
    if output_type not in ("pt", "latent"):
        raise InputError(f"output_type must be 'pt' or 'latent'; got {output_type!r}.")
    return steps


def sde_denoise(
    velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    latents: torch.Tensor,
    schedule: FluxSchedule,
    noise_level: float,
    noise_steps: Sequence[int],
    generator: torch.Generator | None = None,
    scheduler: FlowGRPOScheduler | None = None,
) -> SampleOutput:
    """The denoising loop every sampler shares: Euler ODE steps, and the Flow-GRPO SDE step
    (:class:`paco_grpo.scheduling_flow_grpo.FlowGRPOScheduler`) at ``noise_steps``, whose
    transitions and log-probs are recorded.

    Args:
        velocity: ``velocity(latents, timestep) -> v``, the (guided) model prediction for the
            packed ``latents`` at ``timestep`` in [0, 1000].
        latents: packed initial latents ``(B, seq, C)``.
        schedule: timesteps and sigmas.
        noise_level: ``a`` of the SDE steps.
        noise_steps: sorted step indices that take the SDE step.
        generator: draws the SDE noise.
        scheduler: the stochastic step; default ``FlowGRPOScheduler(noise_level)`` (the SDE).
            ``noise_level`` is its ``a`` at the noise steps either way.

    Returns:
        A :class:`SampleOutput` with ``images=None`` (the caller decodes).

    Example:
        >>> from diffusers import FlowMatchEulerDiscreteScheduler
        >>> from paco_grpo.timesteps import flux_schedule
        >>> schedule = flux_schedule(FlowMatchEulerDiscreteScheduler(), 4, 16)
        >>> out = sde_denoise(lambda x, t: -x, torch.ones(2, 16, 4), schedule, 0.7, [1])
        >>> out.log_probs.shape, out.noise_latents.shape
        (torch.Size([2, 1]), torch.Size([2, 1, 16, 4]))
    """
    scheduler = scheduler if scheduler is not None else FlowGRPOScheduler(noise_level)
    before, after, log_probs = [], [], []
    for i, t in enumerate(schedule.timesteps):
        v = velocity(latents, t)
        step = scheduler.step(
            v,
            schedule.sigmas[i],
            schedule.sigmas[i + 1],
            latents,
            sigma_max=schedule.sigma_max,
            noise_level=noise_level if i in noise_steps else 0.0,
            generator=generator,
        )
        if i in noise_steps:
            before.append(latents)
            after.append(step.prev_sample)
            log_probs.append(step.log_prob)
        latents = step.prev_sample.to(latents.dtype)
    batch = latents.shape[0]

    def stack(items, shape):
        return torch.stack(items, dim=1) if items else latents.new_zeros(shape)

    return SampleOutput(
        images=None,
        latents=latents,
        noise_latents=stack(before, (batch, 0, *latents.shape[1:])),
        noise_next_latents=stack(after, (batch, 0, *latents.shape[1:])),
        log_probs=stack(log_probs, (batch, 0)),
        noise_steps=list(noise_steps),
        schedule=schedule,
    )
