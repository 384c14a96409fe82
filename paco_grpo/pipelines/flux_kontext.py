"""FLUX.1-Kontext editing: Flow-GRPO sampling on diffusers' ``FluxKontextPipeline``.

FLUX.1-Kontext-dev has FLUX.1-dev's components, so the text conditioning, the transformer
call and the decoding are those of :class:`~paco_grpo.pipelines.flux.FluxGRPOSampler`; the
reference image's packed latents are appended to the image tokens with position ids whose
first axis is 1, as ``FluxKontextPipeline`` marks them (see
:mod:`paco_grpo.pipelines.editing`).

    >>> from diffusers import FluxKontextPipeline
    >>> pipe = FluxKontextPipeline.from_pretrained("black-forest-labs/FLUX.1-Kontext-dev")  # doctest: +SKIP
    >>> sampler = KontextGRPOSampler(pipe)                                                # doctest: +SKIP
    >>> out = sampler(["make the sky pink"] * 4, [photo] * 4, area=384 * 384, num_steps=8,
    ...               guidance_scale=2.5, noise_level=0.9, noise_steps=[1])              # doctest: +SKIP
    >>> out.log_probs.shape                                                               # doctest: +SKIP
    torch.Size([4, 1])
"""

from __future__ import annotations

import dataclasses

import torch

from paco_grpo.pipelines.editing import EditGRPOSampler
from paco_grpo.pipelines.flux import (
    FLUX1_ARCHITECTURE,
    FLUX_DEV_SCHEDULER_CONFIG,
    FLUX_LORA_TARGETS,
    FluxConditioning,
    FluxGRPOSampler,
)
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline

__all__ = ["KontextGRPOSampler"]


class KontextGRPOSampler(EditGRPOSampler, FluxGRPOSampler):
    """Flow-GRPO sampling with a ``FluxKontextPipeline`` (FLUX.1-Kontext-dev): one reference
    image per edit, embedded guidance (2.5 by default, as the pipeline's).

    Example:
        >>> sampler = KontextGRPOSampler(pipe, max_sequence_length=512)   # doctest: +SKIP
    """

    default_guidance_scale = 2.5

    def encode_reference(self, pixels: torch.Tensor) -> torch.Tensor:
        latents = self.pipe._encode_vae_image(image=pixels, generator=None)
        channels, h, w = latents.shape[1:]
        return self.pipe._pack_latents(latents, 1, channels, h, w)

    def reference_ids(self, height: int, width: int, device, dtype) -> torch.Tensor:
        """Position ids of a ``height x width`` reference's tokens, whose first axis is 1."""
        f = self.size_multiple
        ids = self.pipe._prepare_latent_image_ids(1, height // f, width // f, device, dtype)
        ids[..., 0] = 1
        return ids

    def condition(self, prompts, height, width, guidance_scale, references) -> FluxConditioning:
        cond = super().condition(prompts, height, width, guidance_scale)
        device, dtype = cond.prompt_embeds.device, cond.prompt_embeds.dtype
        reference = references[0][0]
        ids = self.reference_ids(reference.height, reference.width, device, dtype)
        return dataclasses.replace(
            cond,
            img_ids=torch.cat([cond.img_ids, ids], dim=0),
            image_latents=self.encode_references(references, device, dtype).to(dtype),
        )


register_pipeline(PipelineSpec(
    "flux_kontext", KontextGRPOSampler, "FluxKontextPipeline", edits=True,
    lora_target_modules=FLUX_LORA_TARGETS, scheduler_config=FLUX_DEV_SCHEDULER_CONFIG,
    architectures={"black-forest-labs/FLUX.1-Kontext-dev": FLUX1_ARCHITECTURE},
    tiny_builder="paco_grpo.testing.flux_kontext:build_tiny_flux_kontext",
))  # fmt: skip
