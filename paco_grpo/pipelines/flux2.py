"""FLUX.2 text-to-image: Flow-GRPO sampling on diffusers' ``Flux2Pipeline`` (FLUX.2-dev) and
``Flux2KleinPipeline`` (FLUX.2-klein) components.

Both pipelines share the transformer (``Flux2Transformer2DModel``), the VAE
(``AutoencoderKLFlux2``, whose latents are 2x2-patchified and batch-norm normalised), the
latent packing with 4-D (T, H, W, L) position ids and the schedule (``compute_empirical_mu``:
the shift depends on the token count *and* the number of steps). They differ in the text
encoder (Mistral-Small-3.2 for FLUX.2-dev, Qwen3 for klein: the hidden states of three
layers stacked, through each pipeline's own ``encode_prompt``) and in guidance: FLUX.2-dev
embeds ``guidance_scale`` in the transformer; klein's non-distilled ("base") models run true
classifier-free guidance against an empty negative prompt, its step-distilled ones none.
One sampler, :class:`Flux2GRPOSampler`, serves both; with ``noise_level = 0`` it returns
what the diffusers pipeline returns for the same seed.

    >>> from diffusers import Flux2KleinPipeline
    >>> pipe = Flux2KleinPipeline.from_pretrained("black-forest-labs/FLUX.2-klein-4B")  # doctest: +SKIP
    >>> sampler = Flux2GRPOSampler(pipe)                                                # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=4,
    ...               guidance_scale=1.0, noise_level=0.7, noise_steps=[1])           # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline
from paco_grpo.pipelines.sampling import (
    GRPOSampler,
    SampleOutput,
    check_sampling_inputs,
    sde_denoise,
)
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import FluxSchedule, flux_schedule

logger = logging.getLogger(__name__)

__all__ = ["Flux2Conditioning", "Flux2GRPOSampler"]


@dataclass
class Flux2Conditioning:
    """FLUX.2 conditioning of a batch: text tokens and their 4-D ids, the image tokens' ids,
    and the negative prompt's tokens when true CFG runs (klein base models)."""

    prompt_embeds: torch.Tensor
    text_ids: torch.Tensor
    img_ids: torch.Tensor
    negative_prompt_embeds: torch.Tensor | None = None


class Flux2GRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions on a ``Flux2Pipeline`` or ``Flux2KleinPipeline``.

    Args:
        pipe: the diffusers pipeline (its transformer may be wrapped with peft LoRA; pass the
            wrapped module as ``transformer=`` to the calls).
        max_sequence_length: text tokens per prompt (512 for both models).
        negative_prompt: the negative prompt of klein's true CFG (diffusers uses ``""``);
            unused by FLUX.2-dev and by step-distilled klein models.

    Prompt encodings are cached per prompt text (the text encoder is frozen).
    """

    def __init__(self, pipe, max_sequence_length: int = 512, negative_prompt: str = "") -> None:
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt
        self._cache: dict[str, torch.Tensor] = {}

    def true_cfg(self, guidance_scale: float) -> bool:
        """Whether a call with ``guidance_scale`` runs true CFG (a non-distilled klein, > 1),
        as ``Flux2KleinPipeline.do_classifier_free_guidance`` decides."""
        distilled = getattr(self.pipe.config, "is_distilled", None)
        return distilled is False and guidance_scale > 1

    # ------------------------------------------------------------------ building blocks
    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], device=None) -> torch.Tensor:
        """Text tokens ``(B, L, D)`` from the pipeline's ``encode_prompt``, once per text."""
        device = device or self.pipe._execution_device
        # One text at a time, so a prompt's encoding does not depend on its batch.
        for p in dict.fromkeys(prompts):
            if p not in self._cache:
                embeds, _ = self.pipe.encode_prompt(
                    prompt=[p], device=device, max_sequence_length=self.max_sequence_length
                )
                self._cache[p] = embeds[0]
        return torch.stack([self._cache[p] for p in prompts]).to(device)

    def clear_cache(self) -> None:
        self._cache.clear()

    def latent_ids(self, batch: int, height: int, width: int, device) -> torch.Tensor:
        """4-D (T, H, W, L) ids ``(B, h * w, 4)`` of the packed image tokens."""
        f = self.size_multiple
        grid = torch.empty(1, 1, height // f, width // f)
        return self.pipe._prepare_latent_ids(grid).expand(batch, -1, -1).to(device)

    def condition(self, prompts, height, width, guidance_scale, device=None) -> Flux2Conditioning:
        """The conditioning of ``prompts`` at ``height x width`` as the pipeline builds it."""
        device = device or self.pipe._execution_device
        embeds = self.encode_prompts(prompts, device)
        negative = None
        if self.true_cfg(guidance_scale):
            negative = self.encode_prompts([self.negative_prompt] * len(prompts), device)
        return Flux2Conditioning(
            prompt_embeds=embeds,
            text_ids=self.pipe._prepare_text_ids(embeds).to(device),
            img_ids=self.latent_ids(len(prompts), height, width, device),
            negative_prompt_embeds=negative,
        )

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        """FLUX.2's schedule: ``compute_empirical_mu`` of the token count and step count."""
        from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

        f = self.size_multiple
        seq = (height // f) * (width // f)
        mu = compute_empirical_mu(image_seq_len=seq, num_steps=num_steps)
        return flux_schedule(self.pipe.scheduler, num_steps, seq, device=device, mu=mu)

    def velocity(
        self,
        transformer,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: Flux2Conditioning,
        guidance_scale: float,
    ) -> torch.Tensor:
        """The (guided) velocity, called as the diffusers pipeline calls the transformer.

        ``timestep`` is in [0, 1000] (one value or one per sample).
        """
        batch = latents.shape[0]
        timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
        timestep = timestep.to(latents.dtype)
        config = transformer.module.config if hasattr(transformer, "module") else transformer.config
        guidance = None
        if config.guidance_embeds:  # FLUX.2-dev's embedded guidance
            guidance = torch.full([batch], guidance_scale, device=latents.device)

        def forward(embeds):
            return transformer(
                # contiguous: re-scoring passes a strided slice of the recorded latents
                hidden_states=latents.contiguous(),
                timestep=timestep / 1000,
                guidance=guidance,
                encoder_hidden_states=embeds,
                txt_ids=cond.text_ids,
                img_ids=cond.img_ids,
                joint_attention_kwargs={},
                return_dict=False,
            )[0]

        v = forward(cond.prompt_embeds)
        if cond.negative_prompt_embeds is not None:  # klein base: true CFG, no rescaling
            neg = forward(cond.negative_prompt_embeds)
            v = neg + guidance_scale * (v - neg)
        return v

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
        """The velocity at recorded ``latents`` (see :meth:`GRPOSampler.transition_velocity`)."""
        cond = self.condition(prompts, height, width, guidance_scale, latents.device)
        return self.velocity(transformer, latents, timestep, cond, guidance_scale)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1], as the pipelines decode:
        unpack, undo the VAE's batch-norm normalisation, unpatchify, decode."""
        pipe, vae = self.pipe, self.pipe.vae
        f = self.size_multiple
        batch, _, channels = latents.shape
        # the ids are row-major (h, w), so scattering by id is this reshape
        latents = latents.reshape(batch, height // f, width // f, channels).permute(0, 3, 1, 2)
        mean = vae.bn.running_mean.view(1, -1, 1, 1).to(latents.device, latents.dtype)
        std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps)
        latents = latents * std.to(latents.device, latents.dtype) + mean
        latents = pipe._unpatchify_latents(latents)
        image = vae.decode(latents.to(vae.dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(image, output_type="pt")

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def __call__(
        self,
        prompts: Sequence[str],
        height: int = 512,
        width: int = 512,
        num_steps: int = 10,
        guidance_scale: float = 4.0,
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
            height / width: image size in pixels (multiples of ``2 * vae_scale_factor``).
            num_steps: denoising steps.
            guidance_scale: FLUX.2-dev's embedded guidance; klein's true-CFG scale (> 1 runs
                CFG on non-distilled models; distilled models ignore it, as diffusers does).
            noise_level: ``a`` of the SDE steps.
            noise_steps: step indices that take the SDE step (and are recorded); every other
                step is the Euler ODE step. Empty = plain ODE sampling.
            generator: seeds the initial latents and then the SDE noise.
            latents: optional initial latents ``(B, 4 * C, h, w)`` (patchified, unpacked).
            transformer: the (possibly LoRA-wrapped) transformer; default the pipeline's.
            output_type: ``"pt"`` (decoded images) or ``"latent"``.
            scheduler: the stochastic step (SDE or CPS); default Flow-GRPO's SDE.
        """
        pipe = self.pipe
        transformer = transformer if transformer is not None else pipe.transformer
        # 1. Check inputs
        noise_steps = check_sampling_inputs(
            height, width, self.size_multiple, num_steps, noise_steps, output_type
        )
        device = pipe._execution_device

        # 2. Encode prompts (cached per prompt text; the negative one for true CFG)
        cond = self.condition(prompts, height, width, guidance_scale, device)

        # 3. Prepare latents (diffusers' own, same generator use as the pipeline)
        latents, _ = pipe.prepare_latents(
            len(prompts),
            pipe.transformer.config.in_channels // 4,
            height,
            width,
            cond.prompt_embeds.dtype,
            device,
            generator,
            latents,
        )

        # 4. Timesteps (FLUX.2's empirical resolution- and step-dependent shift)
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


register_pipeline(PipelineSpec("flux2", Flux2GRPOSampler, "Flux2Pipeline"))
register_pipeline(
    PipelineSpec(
        "flux2_klein",
        Flux2GRPOSampler,
        "Flux2KleinPipeline",
        true_cfg=True,
        config_kwargs=("max_sequence_length", "negative_prompt"),
    )
)
