"""Stable Diffusion 3 / 3.5 text-to-image: Flow-GRPO sampling on diffusers'
``StableDiffusion3Pipeline`` components.

:class:`SD3GRPOSampler` reads like ``StableDiffusion3Pipeline.__call__`` (check inputs ->
encode prompt -> prepare latents -> timesteps -> denoising loop -> decode) and reuses the
pipeline's own ``encode_prompt`` (CLIP-L and CLIP-G hidden states side by side, zero-padded
to T5's width and followed by the T5 tokens; the two pooled CLIP projections concatenated),
``prepare_latents`` (unpacked ``(B, 16, H/8, W/8)`` latents: the transformer patchifies),
scheduler config (a static shift of 3.0 for SD3.5, :func:`paco_grpo.timesteps.sd3_schedule`)
and VAE decode, so with ``noise_level = 0`` it returns what ``StableDiffusion3Pipeline``
returns for the same seed. ``guidance_scale`` is classifier-free guidance as the pipeline
runs it: above 1 one transformer call on the batch ``[negative; prompt]`` and
``neg + s * (cond - neg)``; 4.5 for SD3.5 Large, 3.5 for Medium (their model cards).

    >>> from diffusers import StableDiffusion3Pipeline
    >>> pipe = StableDiffusion3Pipeline.from_pretrained(
    ...     "stabilityai/stable-diffusion-3.5-large")                        # doctest: +SKIP
    >>> sampler = SD3GRPOSampler(pipe, max_sequence_length=256)                # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=10,
    ...               guidance_scale=4.5, noise_level=0.7, noise_steps=[1])  # doctest: +SKIP
    >>> out.noise_latents.shape                                               # doctest: +SKIP
    torch.Size([4, 1, 16, 64, 64])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paco_grpo.pipelines.flux import PromptEmbeddings
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline
from paco_grpo.pipelines.sampling import (
    GRPOSampler,
    SampleOutput,
    check_sampling_inputs,
    decode_scaled_latents,
    sde_denoise,
)
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import FluxSchedule, sd3_schedule

__all__ = ["SD3GRPOSampler"]


class SD3GRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions, on a ``StableDiffusion3Pipeline``'s components.

    Latents stay unpacked, ``(B, C, H/8, W/8)``: ``SampleOutput.noise_latents`` is
    ``(B, S, C, H/8, W/8)``, and the step's log-probability is the mean over those elements.

    Args:
        pipe: a ``diffusers.StableDiffusion3Pipeline`` (its transformer may carry a peft LoRA;
            pass the wrapped module as ``transformer=`` to the calls).
        max_sequence_length: T5 tokens per prompt (256 is the pipeline's default; at most 512).
        negative_prompt: the negative prompt of classifier-free guidance (the pipeline's
            default is the empty prompt).

    Prompt encodings are cached per prompt text (the text encoders are frozen).
    """

    def __init__(self, pipe, max_sequence_length: int = 256, negative_prompt: str = "") -> None:
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of the VAE factor times the transformer's patch."""
        return self.vae_scale_factor * self.pipe.transformer.config.patch_size

    # ------------------------------------------------------------------ building blocks
    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], device=None) -> PromptEmbeddings:
        """Encode prompts with the pipeline's ``encode_prompt``, once per distinct text
        (``text_ids`` is unused by SD3 and left empty)."""
        device = device or self.pipe._execution_device
        # One text at a time, as FlowGRPOSampler: a resumed run encodes a prompt exactly as
        # the uninterrupted run did, whatever else is in the batch.
        for p in dict.fromkeys(prompts):
            if p not in self._cache:
                embeds, _, pooled, _ = self.pipe.encode_prompt(
                    prompt=[p],
                    prompt_2=None,
                    prompt_3=None,
                    device=device,
                    do_classifier_free_guidance=False,
                    max_sequence_length=self.max_sequence_length,
                )
                self._cache[p] = (embeds[0], pooled[0])
        embeds = torch.stack([self._cache[p][0] for p in prompts]).to(device)
        pooled = torch.stack([self._cache[p][1] for p in prompts]).to(device)
        return PromptEmbeddings(embeds, pooled, embeds.new_zeros(0, 3))

    def clear_cache(self) -> None:
        self._cache.clear()

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        """The pipeline's schedule (:func:`paco_grpo.timesteps.sd3_schedule`)."""
        patch = self.pipe.transformer.config.patch_size
        seq = (height // self.vae_scale_factor // patch) * (width // self.vae_scale_factor // patch)
        return sd3_schedule(self.pipe.scheduler, num_steps, seq, device=device)

    def velocity(
        self,
        transformer,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: PromptEmbeddings,
        negative: PromptEmbeddings | None,
        guidance_scale: float,
    ) -> torch.Tensor:
        """The (guided) velocity, called exactly as ``StableDiffusion3Pipeline`` calls it:
        with guidance above 1, one call on ``[negative; prompt]`` and the CFG combination.

        ``timestep`` is in [0, 1000] (one value or one per sample); SD3's transformer takes
        it as is.
        """
        batch = latents.shape[0]
        timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
        embeds, pooled = cond.prompt_embeds, cond.pooled_prompt_embeds
        # contiguous: a strided slice of the recorded latents rounds differently in bf16
        # (see FlowGRPOSampler.velocity).
        model_input = latents.contiguous()
        cfg = guidance_scale > 1
        if cfg:
            embeds = torch.cat([negative.prompt_embeds, embeds])
            pooled = torch.cat([negative.pooled_prompt_embeds, pooled])
            model_input = torch.cat([model_input] * 2)
            timestep = torch.cat([timestep] * 2)
        v = transformer(
            hidden_states=model_input,
            timestep=timestep,
            encoder_hidden_states=embeds,
            pooled_projections=pooled,
            joint_attention_kwargs=None,
            return_dict=False,
        )[0]
        if cfg:
            uncond, text = v.chunk(2)
            v = uncond + guidance_scale * (text - uncond)
        return v

    def _negative(self, batch: int, guidance_scale: float, device) -> PromptEmbeddings | None:
        if guidance_scale <= 1:
            return None
        return self.encode_prompts([self.negative_prompt] * batch, device)

    def transition_velocity(
        self,
        transformer,
        latents,
        timestep,
        prompts,
        height,
        width,
        guidance_scale,
        references=None,
    ) -> torch.Tensor:
        """The velocity at recorded ``latents`` (see :meth:`GRPOSampler.transition_velocity`;
        here the latents are unpacked, ``(B, C, h, w)``)."""
        cond = self.encode_prompts(prompts, latents.device)
        negative = self._negative(len(prompts), guidance_scale, latents.device)
        return self.velocity(transformer, latents, timestep, cond, negative, guidance_scale)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Latents -> images ``(B, 3, H, W)`` in [0, 1], as ``StableDiffusion3Pipeline``
        decodes (``latents / scaling_factor + shift_factor``)."""
        return decode_scaled_latents(self.pipe, latents)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def __call__(
        self,
        prompts: Sequence[str],
        height: int = 1024,
        width: int = 1024,
        num_steps: int = 10,
        guidance_scale: float = 4.5,
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
            prompts: one prompt per image.
            height / width: image size in pixels (multiples of :attr:`size_multiple`).
            num_steps: denoising steps.
            guidance_scale: classifier-free guidance scale (> 1 runs it with
                ``negative_prompt``; 4.5 for SD3.5 Large, 3.5 for Medium).
            noise_level: ``a`` of the SDE steps.
            noise_steps: step indices that take the SDE step (and are recorded); every other
                step is the Euler ODE step. Empty = plain ODE sampling.
            generator: seeds the initial latents and then the SDE noise.
            latents: optional initial latents ``(B, C, H/8, W/8)``.
            transformer: the (possibly LoRA-wrapped) transformer; default the pipeline's.
            output_type: ``"pt"`` (decoded images) or ``"latent"``.
            scheduler: the stochastic step (SDE or CPS, see
                :class:`paco_grpo.scheduling_flow_grpo.FlowGRPOScheduler`);
                default Flow-GRPO's SDE. ``noise_level`` sets its ``a``.
        """
        pipe = self.pipe
        transformer = transformer if transformer is not None else pipe.transformer
        # 1. Check inputs
        noise_steps = check_sampling_inputs(
            height, width, self.size_multiple, num_steps, noise_steps, output_type
        )
        device = pipe._execution_device
        batch = len(prompts)

        # 2. Encode prompts (cached per prompt text), and the negative prompt for CFG
        cond = self.encode_prompts(prompts, device)
        negative = self._negative(batch, guidance_scale, device)

        # 3. Prepare latents (diffusers' own, same generator use as StableDiffusion3Pipeline)
        latents = pipe.prepare_latents(
            batch,
            pipe.transformer.config.in_channels,
            height,
            width,
            cond.prompt_embeds.dtype,
            device,
            generator,
            latents,
        )

        # 4. Timesteps (the scheduler's static shift)
        schedule = self.schedule(height, width, num_steps, device=device)

        # 5. Denoising loop: Euler ODE steps, SDE steps at `noise_steps` (recorded)
        out = sde_denoise(
            lambda x, t: self.velocity(transformer, x, t, cond, negative, guidance_scale),
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


register_pipeline(
    PipelineSpec(
        "sd3",
        SD3GRPOSampler,
        "StableDiffusion3Pipeline",
        true_cfg=True,
        config_kwargs=("max_sequence_length", "negative_prompt"),
    )
)
