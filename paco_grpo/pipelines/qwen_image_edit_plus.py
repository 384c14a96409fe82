"""Qwen-Image-Edit-Plus (Qwen-Image-Edit-2509 / -2511): Flow-GRPO sampling on diffusers'
``QwenImageEditPlusPipeline``, edits from several reference images.

What differs from Qwen-Image-Edit (:mod:`paco_grpo.pipelines.qwen_image_edit`): an edit
takes one or more references ("the person in picture 1 in the room of picture 2"); the
text encoder reads the instruction with every reference, each resized to about 384^2 px
("Picture 1: ... Picture 2: ...", as the pipeline renders it), and the references' packed
latents follow the target's, one image grid each. The edit has the size of the first
reference (the image being edited; diffusers defaults to the last one's size, and takes any
given size as this sampler does). diffusers samples one prompt per call; this sampler takes
a batch, and where the references of a batch differ in size it calls the transformer once
per group of equal sizes (its image positions are one layout per call).

    >>> from diffusers import QwenImageEditPlusPipeline
    >>> pipe = QwenImageEditPlusPipeline.from_pretrained("Qwen/Qwen-Image-Edit-2509")  # doctest: +SKIP
    >>> sampler = QwenImageEditPlusGRPOSampler(pipe, negative_prompt=" ")             # doctest: +SKIP
    >>> out = sampler(["the cat of picture 2 on the sofa of picture 1"] * 4,
    ...               [[sofa, cat]] * 4, area=512 * 512, num_steps=10, guidance_scale=4.0,
    ...               noise_level=1.0, noise_steps=[1])                              # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paco_grpo.pipelines.qwen_image import (
    QWEN_IMAGE_ARCHITECTURE,
    QWEN_IMAGE_LORA_TARGETS,
    QWEN_IMAGE_SCHEDULER_CONFIG,
    QwenImageConditioning,
    unpad_prompt_embeds,
)
from paco_grpo.pipelines.qwen_image_edit import QwenImageEditGRPOSampler
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline

__all__ = ["QwenImageEditPlusGRPOSampler", "ReferenceGroups"]


@dataclass
class ReferenceGroups:
    """The conditioning of a batch whose references differ in size: one
    :class:`~paco_grpo.pipelines.qwen_image.QwenImageConditioning` per group of samples whose
    references have the same sizes, with those samples' batch indices."""

    groups: list[tuple[list[int], QwenImageConditioning]]

    @property
    def prompt_embeds(self) -> torch.Tensor:
        """A group's text tokens: their dtype and device are the batch's (the noise draw's)."""
        return self.groups[0][1].prompt_embeds


class QwenImageEditPlusGRPOSampler(QwenImageEditGRPOSampler):
    """Flow-GRPO sampling with a ``QwenImageEditPlusPipeline`` (Qwen-Image-Edit-2509, -2511):
    any number of reference images per edit, the first the image being edited.

    Args:
        pipe: a ``diffusers.QwenImageEditPlusPipeline``.
        max_sequence_length: unused (the pipeline reads the whole instruction).
        negative_prompt: the negative prompt of true CFG (default ``" "``).
    """

    max_references = None

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor]:
        """The tokens of ``prompt`` read with every reference, each resized to the pipeline's
        condition area (about 384^2 px, sides multiples of 32)."""
        from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import (
            CONDITION_IMAGE_SIZE,
            calculate_dimensions,
        )

        images = []
        for image in references:
            width, height = calculate_dimensions(CONDITION_IMAGE_SIZE, image.width / image.height)
            images.append(self.pipe.image_processor.resize(image, height, width))
        embeds, mask = self.pipe.encode_prompt(prompt=[prompt], image=images, device=device)
        return (unpad_prompt_embeds(embeds, mask),)

    def condition(self, prompts, height, width, guidance_scale, references):
        """The batch's conditioning; a :class:`ReferenceGroups` where its references differ in
        size."""
        sizes: dict[tuple, list[int]] = {}
        for k, refs in enumerate(references):
            sizes.setdefault(tuple(im.size for im in refs), []).append(k)
        if len(sizes) == 1:
            return super().condition(prompts, height, width, guidance_scale, references)
        return ReferenceGroups(
            [
                (
                    rows,
                    super(QwenImageEditPlusGRPOSampler, self).condition(
                        [prompts[k] for k in rows],
                        height,
                        width,
                        guidance_scale,
                        [references[k] for k in rows],
                    ),
                )  # fmt: skip
                for rows in sizes.values()
            ]
        )

    def velocity(self, transformer, latents, timestep, cond, guidance_scale) -> torch.Tensor:
        """The (true-CFG) velocity; a :class:`ReferenceGroups` batch one call per group."""
        if not isinstance(cond, ReferenceGroups):
            return super().velocity(transformer, latents, timestep, cond, guidance_scale)
        parts = [
            (
                rows,
                super(QwenImageEditPlusGRPOSampler, self).velocity(
                    transformer,
                    latents[rows],
                    timestep if timestep.ndim == 0 else timestep[rows],
                    group,
                    guidance_scale,
                ),
            )  # fmt: skip
            for rows, group in cond.groups
        ]
        first = parts[0][1]
        v = first.new_empty((latents.shape[0], *first.shape[1:]))
        for rows, part in parts:
            v[rows] = part
        return v


register_pipeline(PipelineSpec(
    "qwen_image_edit_plus", QwenImageEditPlusGRPOSampler, "QwenImageEditPlusPipeline",
    edits=True, true_cfg=True, config_kwargs=("max_sequence_length", "negative_prompt"),
    lora_target_modules=QWEN_IMAGE_LORA_TARGETS, scheduler_config=QWEN_IMAGE_SCHEDULER_CONFIG,
    # Qwen-Image-Edit-2509 is Qwen-Image's architecture (the text encoder sees the references)
    architectures={"Qwen/Qwen-Image-Edit-2509": QWEN_IMAGE_ARCHITECTURE},
    tiny_builder="paco_grpo.testing.qwen_image_edit:build_tiny_qwen_image_edit_plus",
))  # fmt: skip
