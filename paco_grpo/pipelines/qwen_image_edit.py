"""Qwen-Image-Edit editing: Flow-GRPO sampling on diffusers' ``QwenImageEditPipeline``.

Qwen-Image-Edit is Qwen-Image's transformer and VAE with a text encoder that also sees the
reference image: the true-CFG transformer call, the text padding and the decoding are those
of :class:`~paco_grpo.pipelines.qwen_image.QwenImageGRPOSampler`; the reference's packed
latents are appended to the image tokens (see :mod:`paco_grpo.pipelines.editing`).

    >>> from diffusers import QwenImageEditPipeline
    >>> pipe = QwenImageEditPipeline.from_pretrained("Qwen/Qwen-Image-Edit")  # doctest: +SKIP
    >>> sampler = QwenImageEditGRPOSampler(pipe, negative_prompt=" ")        # doctest: +SKIP
    >>> out = sampler(["make the sky pink"] * 4, [photo] * 4, area=512 * 512, num_steps=10,
    ...               guidance_scale=4.0, noise_level=1.0, noise_steps=[1])  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses

import torch

from paco_grpo.pipelines.editing import EditGRPOSampler
from paco_grpo.pipelines.qwen_image import (
    QWEN_IMAGE_ARCHITECTURE,
    QWEN_IMAGE_LORA_TARGETS,
    QWEN_IMAGE_SCHEDULER_CONFIG,
    QwenImageConditioning,
    QwenImageGRPOSampler,
    unpad_prompt_embeds,
)
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline

__all__ = ["QwenImageEditGRPOSampler"]


class QwenImageEditGRPOSampler(EditGRPOSampler, QwenImageGRPOSampler):
    """Flow-GRPO sampling with a ``QwenImageEditPipeline`` (Qwen-Image-Edit): one reference
    image per edit.

    The Qwen2.5-VL text encoder sees the instruction together with the reference image, so
    prompt encodings are cached per (prompt, image). ``guidance_scale`` is Qwen-Image's true
    classifier-free guidance scale: above 1 each velocity is
    ``neg + s * (cond - neg)`` rescaled to the conditional prediction's norm, with
    ``negative_prompt`` (default ``" "``, as Qwen-Image's examples use) as the negative.

    Args:
        pipe: a ``diffusers.QwenImageEditPipeline``.
        max_sequence_length: unused (the pipeline reads the whole instruction).
        negative_prompt: the negative prompt of true CFG.
    """

    text_sees_references = True

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor]:
        """The tokens of ``prompt`` read with its reference image."""
        embeds, mask = self.pipe.encode_prompt(prompt=[prompt], image=references[0], device=device)
        return (unpad_prompt_embeds(embeds, mask),)

    def encode_reference(self, pixels: torch.Tensor) -> torch.Tensor:
        latents = self.pipe._encode_vae_image(image=pixels.unsqueeze(2), generator=None)
        channels, _, h, w = latents.shape[1:]
        return self.pipe._pack_latents(latents, 1, channels, h, w)

    def image_shapes(self, height: int, width: int, references=None) -> list:
        f = self.size_multiple
        target = super().image_shapes(height, width)
        return [*target, *((1, im.height // f, im.width // f) for im in references)]

    def condition(
        self, prompts, height, width, guidance_scale, references
    ) -> QwenImageConditioning:
        cond = super().condition(prompts, height, width, guidance_scale, references)
        dtype = cond.prompt_embeds.dtype
        latents = self.encode_references(references, cond.prompt_embeds.device, dtype)
        return dataclasses.replace(cond, image_latents=latents.to(dtype))


register_pipeline(PipelineSpec(
    "qwen_image_edit", QwenImageEditGRPOSampler, "QwenImageEditPipeline", edits=True,
    true_cfg=True, config_kwargs=("max_sequence_length", "negative_prompt"),
    lora_target_modules=QWEN_IMAGE_LORA_TARGETS, scheduler_config=QWEN_IMAGE_SCHEDULER_CONFIG,
    architectures={"Qwen/Qwen-Image-Edit": QWEN_IMAGE_ARCHITECTURE},
    tiny_builder="paco_grpo.testing.qwen_image_edit:build_tiny_qwen_image_edit",
))  # fmt: skip
