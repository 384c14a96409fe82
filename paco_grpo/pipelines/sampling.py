"""What every policy sampler shares: the one sampling loop and the trainer's interface
(:class:`GRPOSampler`), the sampled batch (:class:`SampleOutput`), the input checks and the
denoising loop with the Flow-GRPO SDE step at the noise steps (:func:`sde_denoise`).

A sampler runs on a diffusers pipeline's components and its ``__call__`` reads like that
pipeline's (check inputs -> encode prompt -> prepare latents -> timesteps -> denoising loop
-> decode); its model file (``paco_grpo/pipelines/<model>.py``) fills in the hooks the loop
calls: what is particular to the model (prompt encoding, latent packing, the transformer
call, decoding).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import FluxSchedule, flux_schedule
from paco_reward.devices import host_to_device, pin_for
from paco_reward.errors import InputError

logger = logging.getLogger(__name__)

__all__ = [
    "GRPOSampler",
    "SampleOutput",
    "check_sampling_inputs",
    "decode_scaled_latents",
    "on_host",
    "sde_denoise",
    "stack_texts",
]


@dataclass
class SampleOutput:
    """One sampled batch.

    Attributes:
        images: ``(B, 3, H, W)`` float in [0, 1] (``None`` with ``output_type="latent"``).
        latents: final packed latents ``(B, seq, C)`` (SD3's and Z-Image's are unpacked,
            ``(B, C, h, w)``; the shapes below follow them).
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
    """The Flow-GRPO sampler of a diffusers pipeline: one ``__call__`` for every model, which
    reads like the pipelines' (check inputs -> encode prompt -> prepare latents -> timesteps
    -> denoising loop -> decode), and the model's hooks it calls, which a model file fills in
    (``paco_grpo/pipelines/<model>.py``) by reusing its diffusers pipeline's own pieces:

    - :meth:`encode_text`: one prompt through the pipeline's ``encode_prompt``;
    - :meth:`condition`: a batch's conditioning (prompt encodings batched, the negative
      prompt of true CFG, position ids; an edit's reference latents);
    - :meth:`prepare_latents`: the pipeline's noise draw and packing;
    - :meth:`schedule`: the pipeline's timesteps (default: FLUX's resolution shift);
    - :meth:`velocity`: the transformer called as the pipeline calls it, guidance included;
    - :meth:`decode`: latents to images.

    What the trainer calls: ``sampler(prompts, height=, width=, ...)`` (text-to-image) or
    ``sampler(prompts, images, area=, ...)`` (editing) samples a batch with SDE steps at
    ``noise_steps`` and returns a :class:`SampleOutput`; :meth:`transition_velocity` is the
    policy's velocity at recorded latents, conditioned as sampling conditioned them (what the
    GRPO update re-scores); :attr:`size_multiple`: image sides must be multiples of it.

    Args:
        pipe: the diffusers pipeline (its transformer may carry a peft LoRA; pass the
            wrapped module as ``transformer=`` to the calls).
        max_sequence_length: text tokens per prompt.

    Example:
        >>> sampler = FluxGRPOSampler(pipe)                                       # doctest: +SKIP
        >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=10,
        ...               noise_level=0.7, noise_steps=[1])                       # doctest: +SKIP
        >>> out.log_probs.shape                                                   # doctest: +SKIP
        torch.Size([4, 1])
    """

    default_guidance_scale: float = 3.5
    """``guidance_scale`` of a call that gives none (the model's recommended value)."""
    text_sees_references: bool = False
    """Whether :meth:`encode_text` reads the references (editing models whose text encoder
    sees the images): their encodings are then cached per (prompt, references)."""

    def __init__(self, pipe, max_sequence_length: int = 512) -> None:
        self.pipe = pipe
        self.max_sequence_length = max_sequence_length
        # On the host (see encode_prompts): prompt encodings, an edit's reference latents
        # (EditGRPOSampler).
        self._text_cache: dict = {}
        self._image_cache: dict = {}

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent pixel of the pipeline's VAE."""
        return self.pipe.vae_scale_factor

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of this (VAE factor times the 2x2 latent packing)."""
        return self.vae_scale_factor * 2

    def image_seq_len(self, height: int, width: int) -> int:
        """Image tokens of a ``height x width`` image (latent pixels per 2x2 patch)."""
        return (height // self.size_multiple) * (width // self.size_multiple)

    def clear_cache(self) -> None:
        """Forget the cached prompt (and reference) encodings."""
        self._text_cache.clear()
        self._image_cache.clear()

    # ------------------------------------------------------------------ the model's hooks
    def encode_text(self, prompt: str, device, references=None) -> tuple[torch.Tensor, ...]:
        """One prompt through the pipeline's ``encode_prompt``: the per-text tensors
        :meth:`condition` batches (``references``: the prompt's references, for models whose
        text encoder sees them)."""
        raise NotImplementedError

    def condition(self, prompts: Sequence[str], height: int, width: int, guidance_scale: float,
                  references: list[list] | None = None):  # fmt: skip
        """What the transformer is conditioned on for ``prompts`` at ``height x width``
        (``references``: per prompt, its resized reference images)."""
        raise NotImplementedError

    def prepare_latents(self, batch: int, height: int, width: int, cond, device, generator,
                        latents: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """Initial noise drawn (and packed) as the diffusers pipeline draws it."""
        raise NotImplementedError

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        """The pipeline's timesteps and sigmas (default: FLUX's resolution shift of the
        scheduler config, :func:`paco_grpo.timesteps.flux_schedule`)."""
        seq = self.image_seq_len(height, width)
        return flux_schedule(self.pipe.scheduler, num_steps, seq, device=device)

    def velocity(self, transformer, latents: torch.Tensor, timestep: torch.Tensor, cond,
                 guidance_scale: float) -> torch.Tensor:  # fmt: skip
        """The (guided) velocity of ``transformer`` at ``latents`` and ``timestep`` in
        [0, 1000] (one value or one per sample), given ``cond``."""
        raise NotImplementedError

    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Latents -> images ``(B, 3, H, W)`` in [0, 1], as the pipeline decodes."""
        raise NotImplementedError

    def model_input(self, latents: torch.Tensor, cond) -> torch.Tensor:
        """The transformer's image tokens: ``latents``, then an edit's packed reference
        latents (``cond.image_latents``) where there are any."""
        image_latents = getattr(cond, "image_latents", None)
        if image_latents is None:
            return latents
        return torch.cat([latents, image_latents.to(latents.dtype)], dim=1)

    @staticmethod
    def text_shapes(config: dict[str, Any], max_sequence_length: int) -> list[tuple[int, ...]]:
        """The shapes of the tensors :meth:`encode_text` returns for a prompt of
        ``max_sequence_length`` tokens, given the transformer's ``config``: what
        ``benchmarks.gpu_check`` draws at random in place of the (frozen) text encoder."""
        raise NotImplementedError

    @staticmethod
    def meta_inputs(config: dict[str, Any], batch: int, image_tokens: int, text_tokens: int,
                    reference_tokens: int, dtype: torch.dtype) -> dict[str, Any]:  # fmt: skip
        """The transformer's keyword arguments for one call of :meth:`velocity` (one guidance
        branch), as meta tensors of these shapes: what ``paco-grpo plan`` measures the
        activations of (``reference_tokens``: an edit's, after the image tokens)."""
        raise NotImplementedError

    def check_references(self, images, count: int) -> list[list] | None:
        """The reference images of a call, one list per prompt; ``None`` for a text-to-image
        model, which takes none."""
        if images is not None:
            raise InputError(
                f"{type(self).__name__} samples text-to-image: it takes no reference images."
            )
        return None

    def check_inputs(self, prompts: Sequence[str], images, height: int | None,
                     width: int | None, area: int | None):  # fmt: skip
        """The references and output size of a call: ``(None, height, width)`` here, 512
        pixels a side by default; editing models resize the references to ``area``."""
        if area is not None:
            raise InputError(
                f"area={area} resizes reference images; {type(self).__name__} takes none."
            )
        return self.check_references(images, len(prompts)), height or 512, width or 512

    # ------------------------------------------------------------------ shared steps
    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], device=None,
                       references: list[list] | None = None) -> list[tuple[torch.Tensor, ...]]:  # fmt: skip
        """:meth:`encode_text` of each prompt on ``device``, each distinct text encoded once,
        alone, and cached (the text encoders are frozen): a batched encoder's numbers depend
        on what else is in the batch, and a resumed run must encode a prompt exactly as the
        uninterrupted run did.

        The cache is in host memory (:func:`on_host`: pinned when ``device`` is a GPU) and
        each call copies its batch's distinct encodings to ``device``: kept on the GPU, a
        run's prompts would hold it for the whole run (FLUX.1's T5 at 512 tokens: 4 MiB a
        prompt, 4.3 GiB for the OCR recipe's 1,100), which ``paco-grpo plan`` does not count."""
        device = torch.device(device or self.pipe._execution_device)
        if references is None or not self.text_sees_references:
            references = [None] * len(prompts)
        keys = [_text_key(p, r) for p, r in zip(prompts, references)]
        for key, prompt, ref in zip(keys, prompts, references):
            if key not in self._text_cache:
                encoded = self.encode_text(prompt, device, ref)
                self._text_cache[key] = tuple(on_host(t, device) for t in encoded)
        batch = {
            key: tuple(host_to_device(t, device) for t in self._text_cache[key])
            for key in dict.fromkeys(keys)
        }
        return [batch[key] for key in keys]

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
        """The (guided) velocity of ``transformer`` at recorded ``latents``, conditioned as
        the sampling call conditioned them.

        Args:
            transformer: the (possibly LoRA-wrapped) transformer.
            latents: latents recorded by a sampling call (``SampleOutput.noise_latents[:, j]``).
            timestep: in [0, 1000], one value or one per sample.
            prompts: the ``B`` prompts they were sampled for.
            height / width: the images' size in pixels.
            guidance_scale: as given to the sampling call.
            references: editing samplers: per prompt, its (already resized) reference
                image or images.
        """
        references = self.check_references(references, len(prompts))
        cond = self.condition(prompts, height, width, guidance_scale, references)
        return self.velocity(transformer, latents, timestep, cond, guidance_scale)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def __call__(
        self,
        prompts: Sequence[str],
        images: Sequence | None = None,
        height: int | None = None,
        width: int | None = None,
        area: int | None = None,
        num_steps: int = 10,
        guidance_scale: float | None = None,
        noise_level: float = 0.7,
        noise_steps: Sequence[int] = (1,),
        generator: torch.Generator | None = None,
        latents: torch.Tensor | None = None,
        transformer=None,
        output_type: str = "pt",
        scheduler: FlowGRPOScheduler | None = None,
    ) -> SampleOutput:
        """Sample one image per prompt (repeat a prompt for a group).

        Args:
            prompts: one prompt (or edit instruction) per image.
            images: editing models only: per prompt, its reference image or a list of them
                (PIL, path, array or tensor; see the model's ``max_references``). A batch's
                first references must resize to one size: the output's.
            height / width: image size in pixels (multiples of :attr:`size_multiple`);
                default 512, or an edit's first resized reference's size.
            area: editing models only: resize each reference, preserving its aspect ratio,
                to about this many pixels (``None``: keep its size, floored to
                :attr:`size_multiple`).
            num_steps: denoising steps.
            guidance_scale: the model's guidance (embedded, or the true-CFG scale with
                ``negative_prompt``); default :attr:`default_guidance_scale`.
            noise_level: ``a`` of the SDE steps.
            noise_steps: step indices that take the SDE step (and are recorded); every other
                step is the Euler ODE step. Empty = plain ODE sampling.
            generator: seeds the initial latents and then the SDE noise.
            latents: optional initial latents, as the diffusers pipeline takes them.
            transformer: the (possibly LoRA-wrapped) transformer; default the pipeline's.
            output_type: ``"pt"`` (decoded images) or ``"latent"``.
            scheduler: the stochastic step (SDE or CPS, see
                :class:`paco_grpo.scheduling_flow_grpo.FlowGRPOScheduler`); default
                Flow-GRPO's SDE. ``noise_level`` sets its ``a``.
        """
        transformer = transformer if transformer is not None else self.pipe.transformer
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        # 1. Check inputs (an edit's references are loaded and resized to `area`)
        if not prompts:
            raise InputError("prompts is empty; pass at least one prompt.")
        references, height, width = self.check_inputs(prompts, images, height, width, area)
        noise_steps = check_sampling_inputs(
            height, width, self.size_multiple, num_steps, noise_steps, output_type
        )
        device = self.pipe._execution_device

        # 2. Encode the prompts (cached per text), the negative prompt of true CFG, references
        cond = self.condition(prompts, height, width, guidance_scale, references)

        # 3. Prepare latents (the pipeline's own noise draw and packing)
        latents = self.prepare_latents(len(prompts), height, width, cond, device, generator,
                                       latents)  # fmt: skip

        # 4. Timesteps (from the pipeline's scheduler config)
        schedule = self.schedule(height, width, num_steps, device)

        # 5. Denoising loop: Euler ODE steps, SDE steps at `noise_steps` (recorded)
        out = sde_denoise(
            lambda x, t: self.velocity(transformer, x, t, cond, guidance_scale),
            latents,
            schedule,
            noise_level,
            noise_steps,
            generator,
            scheduler,
        )

        # 6. Decode
        if output_type != "latent":
            out.images = self.decode(out.latents, height, width)
        return out


def _text_key(prompt: str, references: Sequence | None):
    """The cache key of a prompt's encoding: the text, and its references' content and size
    where the text encoder sees them."""
    if references is None:
        return prompt
    from paco_reward.images import image_hash

    return (prompt, *((image_hash(image), image.size) for image in references))


def on_host(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host copy of ``tensor`` to keep (a cache entry), in page-locked memory when it goes
    back to a CUDA ``device`` (:func:`~paco_reward.devices.pin_for`), so that
    :func:`~paco_reward.devices.host_to_device` copies it there without the host waiting.

    Example:
        >>> on_host(torch.ones(2), torch.device("cpu")).device
        device(type='cpu')
    """
    return pin_for(tensor.detach().to("cpu"), device)


def stack_texts(texts: Sequence[tuple[torch.Tensor, ...]], index: int, device) -> torch.Tensor:
    """The ``index``-th tensor of each prompt's encoding (:meth:`GRPOSampler.encode_prompts`)
    stacked into a batch on ``device``."""
    return torch.stack([text[index] for text in texts]).to(device)


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
