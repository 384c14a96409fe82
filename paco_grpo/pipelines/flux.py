"""FLUX.1-dev text-to-image: Flow-GRPO sampling on diffusers' ``FluxPipeline`` components.

:class:`FlowGRPOSampler` reads like ``FluxPipeline.__call__`` (check inputs -> encode
prompt -> prepare latents -> timesteps -> denoising loop -> decode) and reuses the
pipeline's own ``encode_prompt``, ``prepare_latents``, latent packing, VAE decode and
scheduler config, so with ``noise_level = 0`` it returns what ``FluxPipeline`` returns
for the same seed. At the configured ``noise_steps`` it takes the Flow-GRPO SDE step
(:class:`paco_grpo.scheduling_flow_grpo.FlowGRPOScheduler`) instead and records the latents before/after the
step and the step's log-probability, which is what the GRPO update re-evaluates.

    >>> from diffusers import FluxPipeline
    >>> pipe = FluxPipeline.from_pretrained("black-forest-labs/FLUX.1-dev")   # doctest: +SKIP
    >>> sampler = FlowGRPOSampler(pipe)                                       # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=10,
    ...               noise_level=0.7, noise_steps=[1])                       # doctest: +SKIP
    >>> out.log_probs.shape                                                   # doctest: +SKIP
    torch.Size([4, 1])
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
    decode_scaled_latents,
    sde_denoise,
)
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import FluxSchedule, flux_schedule

logger = logging.getLogger(__name__)

__all__ = ["FlowGRPOSampler", "PromptEmbeddings"]


@dataclass
class PromptEmbeddings:
    """FLUX text conditioning for a batch: T5 tokens, pooled CLIP, text position ids."""

    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    text_ids: torch.Tensor

    def index(self, idx) -> PromptEmbeddings:
        return PromptEmbeddings(
            self.prompt_embeds[idx], self.pooled_prompt_embeds[idx], self.text_ids
        )


class FlowGRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions, on a ``FluxPipeline``'s components.

    Args:
        pipe: a ``diffusers.FluxPipeline`` (its transformer may be wrapped with peft LoRA;
            pass the wrapped module as ``transformer=`` to the calls).
        max_sequence_length: T5 tokens per prompt (512 for FLUX.1-dev).

    Prompt encodings are cached per prompt text (the text encoders are frozen).
    """

    def __init__(self, pipe, max_sequence_length: int = 512) -> None:
        super().__init__(pipe, max_sequence_length)
        self._cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    # ------------------------------------------------------------------ building blocks
    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str], device=None) -> PromptEmbeddings:
        """Encode prompts with the pipeline's ``encode_prompt``, once per distinct text."""
        device = device or self.pipe._execution_device
        # One text at a time: a batched encoder's numbers depend on what else is in the batch,
        # and a resumed run must encode a prompt exactly as the uninterrupted run did.
        for p in dict.fromkeys(prompts):
            if p not in self._cache:
                embeds, pooled, _ = self.pipe.encode_prompt(
                    prompt=[p],
                    prompt_2=None,
                    device=device,
                    max_sequence_length=self.max_sequence_length,
                )
                self._cache[p] = (embeds[0], pooled[0])
        embeds = torch.stack([self._cache[p][0] for p in prompts]).to(device)
        pooled = torch.stack([self._cache[p][1] for p in prompts]).to(device)
        text_ids = torch.zeros(embeds.shape[1], 3, device=device, dtype=embeds.dtype)
        return PromptEmbeddings(embeds, pooled, text_ids)

    def clear_cache(self) -> None:
        self._cache.clear()

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        seq = (2 * (height // (self.vae_scale_factor * 2)) // 2) * (
            2 * (width // (self.vae_scale_factor * 2)) // 2
        )
        return flux_schedule(self.pipe.scheduler, num_steps, seq, device=device)

    def latent_ids(self, height: int, width: int, device, dtype) -> torch.Tensor:
        h = 2 * (height // (self.vae_scale_factor * 2))
        w = 2 * (width // (self.vae_scale_factor * 2))
        return self.pipe._prepare_latent_image_ids(1, h // 2, w // 2, device, dtype)

    def velocity(
        self,
        transformer,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: PromptEmbeddings,
        img_ids: torch.Tensor,
        guidance_scale: float,
    ) -> torch.Tensor:
        """The transformer's velocity prediction, called exactly as ``FluxPipeline`` calls it.

        ``timestep`` is in [0, 1000] (one value or one per sample).
        """
        batch = latents.shape[0]
        timestep = timestep.expand(batch).to(latents.dtype) if timestep.ndim == 0 else timestep
        guidance = None
        config = transformer.module.config if hasattr(transformer, "module") else transformer.config
        if config.guidance_embeds:
            guidance = torch.full([1], guidance_scale, device=latents.device, dtype=torch.float32)
            guidance = guidance.expand(batch)
        return transformer(
            # contiguous: in bf16, nn.Linear rounds a strided input differently (matmul, then
            # + bias) from a contiguous one (fused addmm), and re-scoring passes a strided
            # slice of the recorded latents where sampling passed a contiguous tensor.
            hidden_states=latents.contiguous(),
            timestep=timestep.to(latents.dtype) / 1000,
            guidance=guidance,
            pooled_projections=cond.pooled_prompt_embeds,
            encoder_hidden_states=cond.prompt_embeds,
            txt_ids=cond.text_ids,
            img_ids=img_ids,
            joint_attention_kwargs={},
            return_dict=False,
        )[0]

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
        cond = self.encode_prompts(prompts)
        img_ids = self.latent_ids(height, width, latents.device, cond.prompt_embeds.dtype)
        return self.velocity(transformer, latents, timestep, cond, img_ids, guidance_scale)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1], as ``FluxPipeline`` decodes."""
        latents = self.pipe._unpack_latents(latents, height, width, self.vae_scale_factor)
        return decode_scaled_latents(self.pipe, latents)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def __call__(
        self,
        prompts: Sequence[str],
        height: int = 512,
        width: int = 512,
        num_steps: int = 10,
        guidance_scale: float = 3.5,
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
            guidance_scale: FLUX's embedded guidance.
            noise_level: ``a`` of the SDE steps.
            noise_steps: step indices that take the SDE step (and are recorded); every other
                step is the Euler ODE step. Empty = plain ODE sampling.
            generator: seeds the initial latents and then the SDE noise.
            latents: optional packed initial latents.
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
            height, width, self.vae_scale_factor * 2, num_steps, noise_steps, output_type
        )
        device = pipe._execution_device
        batch = len(prompts)

        # 2. Encode prompts (cached per prompt text)
        cond = self.encode_prompts(prompts, device)

        # 3. Prepare latents (diffusers' own, same generator use as FluxPipeline)
        num_channels_latents = pipe.transformer.config.in_channels // 4
        latents, img_ids = pipe.prepare_latents(
            batch,
            num_channels_latents,
            height,
            width,
            cond.prompt_embeds.dtype,
            device,
            generator,
            latents,
        )

        # 4. Timesteps (FLUX's resolution-shifted schedule)
        schedule = flux_schedule(pipe.scheduler, num_steps, latents.shape[1], device=device)

        # 5. Denoising loop: Euler ODE steps, SDE steps at `noise_steps` (recorded)
        out = sde_denoise(
            lambda x, t: self.velocity(transformer, x, t, cond, img_ids, guidance_scale),
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


register_pipeline(PipelineSpec("flux", FlowGRPOSampler, "FluxPipeline"))
