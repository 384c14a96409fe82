"""Qwen-Image-Edit editing: Flow-GRPO sampling on diffusers' ``QwenImageEditPipeline``.

Qwen-Image-Edit is Qwen-Image's transformer and VAE with a text encoder that also sees the
reference image: the transformer call with true CFG, the text padding and the decoding are
those of :mod:`paco_grpo.pipelines.qwen_image`; the reference's packed latents are appended
to the image tokens (see :mod:`paco_grpo.pipelines.editing`).

    >>> from diffusers import QwenImageEditPipeline
    >>> pipe = QwenImageEditPipeline.from_pretrained("Qwen/Qwen-Image-Edit")  # doctest: +SKIP
    >>> sampler = QwenImageEditGRPOSampler(pipe, negative_prompt=" ")        # doctest: +SKIP
    >>> out = sampler(["make the sky pink"] * 4, [photo] * 4, area=512 * 512, num_steps=10,
    ...               guidance_scale=4.0, noise_level=1.0, noise_steps=[1])  # doctest: +SKIP
"""

from __future__ import annotations

import torch

from paco_grpo.pipelines.editing import EditConditioning, EditGRPOSampler
from paco_grpo.pipelines.qwen_image import (
    QwenImageConditioning,
    decode_qwen_image,
    pad_prompt_embeds,
    qwen_image_velocity,
)
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline
from paco_reward.images import image_hash

__all__ = ["QwenImageEditGRPOSampler"]


class QwenImageEditGRPOSampler(EditGRPOSampler):
    """Flow-GRPO sampling with a ``QwenImageEditPipeline`` (Qwen-Image-Edit).

    The Qwen2.5-VL text encoder sees the instruction together with the reference image, so
    prompt encodings are cached per (prompt, image). ``guidance_scale`` is Qwen-Image's true
    classifier-free guidance scale: above 1 each velocity is
    ``neg + s * (cond - neg)`` rescaled to the conditional prediction's norm, with
    ``negative_prompt`` (default ``" "``, as Qwen-Image's examples use) as the negative.

    Args:
        pipe: a ``diffusers.QwenImageEditPipeline``.
        negative_prompt: the negative prompt of true CFG.
    """

    def __init__(self, pipe, max_sequence_length: int = 512, negative_prompt: str = " ") -> None:
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt

    def _encode_reference(self, pixels: torch.Tensor) -> torch.Tensor:
        pipe = self.pipe
        latents = pipe._encode_vae_image(image=pixels.unsqueeze(2), generator=None)
        channels, _, h, w = latents.shape[1:]
        return pipe._pack_latents(latents, 1, channels, h, w)

    @torch.no_grad()
    def _encode_text(self, prompts, references, device):
        """Per-pair encoder tokens padded to the batch's longest, and the mask (None if full),
        exactly as ``QwenImageEditPipeline.encode_prompt`` pads a batch."""
        tokens = []
        for prompt, ref in zip(prompts, references):
            key = (prompt, image_hash(ref), ref.size)
            if key not in self._prompt_cache:
                embeds, mask = self.pipe.encode_prompt(prompt=[prompt], image=ref, device=device)
                if mask is not None:
                    embeds = embeds[:, : int(mask[0].sum())]
                self._prompt_cache[key] = embeds[0]
            tokens.append(self._prompt_cache[key])
        return pad_prompt_embeds(tokens, device)

    def condition(self, prompts, references, height, width) -> EditConditioning:
        device = self.pipe._execution_device
        embeds, mask = self._encode_text(prompts, references, device)
        neg, neg_mask = self._encode_text([self.negative_prompt] * len(prompts), references, device)
        image_latents = self.encode_references(references, device, embeds.dtype)
        f = self.size_multiple
        ref_h, ref_w = references[0].height, references[0].width
        img_shapes = [[(1, height // f, width // f), (1, ref_h // f, ref_w // f)]] * len(prompts)
        return EditConditioning(
            prompt_embeds=embeds,
            image_latents=image_latents.to(embeds.dtype),
            extras={"qwen": QwenImageConditioning(embeds, mask, neg, neg_mask, img_shapes)},
        )

    def prepare_noise(self, batch, height, width, dtype, device, generator, latents):
        channels = self.pipe.transformer.config.in_channels // 4
        return self.pipe.prepare_latents(
            None, batch, channels, height, width, dtype, device, generator, latents
        )[0]

    def velocity(self, transformer, latents, timestep, cond, guidance_scale):
        model_input = torch.cat([latents, cond.image_latents.to(latents.dtype)], dim=1)
        return qwen_image_velocity(
            transformer,
            model_input,
            timestep,
            cond.extras["qwen"],
            guidance_scale,
            num_tokens=latents.shape[1],
        )

    def decode(self, latents, height, width):
        return decode_qwen_image(self.pipe, latents, height, width)


register_pipeline(
    PipelineSpec(
        "qwen_image_edit",
        QwenImageEditGRPOSampler,
        "QwenImageEditPipeline",
        edits=True,
        true_cfg=True,
        config_kwargs=("max_sequence_length", "negative_prompt"),
    )
)
