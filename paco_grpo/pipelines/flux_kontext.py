"""FLUX.1-Kontext editing: Flow-GRPO sampling on diffusers' ``FluxKontextPipeline``.

FLUX.1-Kontext-dev has FLUX.1-dev's components, so the text conditioning, the transformer
call and the decoding are those of :class:`~paco_grpo.pipelines.flux.FlowGRPOSampler`; the
reference image's packed latents are appended to the image tokens (see
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

import torch

from paco_grpo.pipelines.editing import EditConditioning, EditGRPOSampler
from paco_grpo.pipelines.flux import FlowGRPOSampler, PromptEmbeddings
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline

__all__ = ["KontextGRPOSampler"]


class KontextGRPOSampler(EditGRPOSampler):
    """Flow-GRPO sampling with a ``FluxKontextPipeline`` (FLUX.1-Kontext-dev).

    The text conditioning, the transformer call and the decoding are those of the
    text-to-image :class:`~paco_grpo.pipelines.flux.FlowGRPOSampler` (the Kontext pipeline has the
    same components); the reference's packed latents are appended to the image tokens with
    position ids whose first axis is 1, as ``FluxKontextPipeline`` does.

    Example:
        >>> sampler = KontextGRPOSampler(pipe, max_sequence_length=512)   # doctest: +SKIP
    """

    def __init__(self, pipe, max_sequence_length: int = 512) -> None:
        super().__init__(pipe, max_sequence_length)
        self.flux = FlowGRPOSampler(pipe, max_sequence_length=max_sequence_length)

    def clear_cache(self) -> None:
        super().clear_cache()
        self.flux.clear_cache()

    def _encode_reference(self, pixels: torch.Tensor) -> torch.Tensor:
        pipe = self.pipe
        latents = pipe._encode_vae_image(image=pixels, generator=None)
        channels, h, w = latents.shape[1:]
        return pipe._pack_latents(latents, 1, channels, h, w)

    def condition(self, prompts, references, height, width) -> EditConditioning:
        device = self.pipe._execution_device
        text = self.flux.encode_prompts(prompts, device)
        image_latents = self.encode_references(references, device, text.prompt_embeds.dtype)
        ref_h, ref_w = references[0].height, references[0].width
        dtype = text.prompt_embeds.dtype
        return EditConditioning(
            prompt_embeds=text.prompt_embeds,
            image_latents=image_latents.to(dtype),
            extras={
                "text": text,
                "ids": self.position_ids(height, width, ref_h, ref_w, device, dtype),
            },
        )

    def position_ids(self, height, width, ref_height, ref_width, device, dtype) -> torch.Tensor:
        """Position ids of the target's tokens followed by the reference's, whose first axis
        is 1 (as ``FluxKontextPipeline`` marks them)."""
        m = self.size_multiple
        image_ids = self.pipe._prepare_latent_image_ids(
            1, ref_height // m, ref_width // m, device, dtype
        )
        image_ids[..., 0] = 1
        latent_ids = self.flux.latent_ids(height, width, device, dtype)
        return torch.cat([latent_ids, image_ids], dim=0)

    def prepare_noise(self, batch, height, width, dtype, device, generator, latents):
        channels = self.pipe.transformer.config.in_channels // 4
        return self.pipe.prepare_latents(
            None, batch, channels, height, width, dtype, device, generator, latents
        )[0]

    def velocity(self, transformer, latents, timestep, cond, guidance_scale):
        text: PromptEmbeddings = cond.extras["text"]
        model_input = torch.cat([latents, cond.image_latents.to(latents.dtype)], dim=1)
        v = self.flux.velocity(
            transformer, model_input, timestep, text, cond.extras["ids"], guidance_scale
        )
        return v[:, : latents.shape[1]]

    def decode(self, latents, height, width):
        return self.flux.decode(latents, height, width)


register_pipeline(
    PipelineSpec("flux_kontext", KontextGRPOSampler, "FluxKontextPipeline", edits=True)
)
