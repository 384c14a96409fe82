"""What the editing policies share: reference images resized to an area, editing prompt
items, and :class:`EditGRPOSampler`, the sampling structure of FLUX.1-Kontext
(:mod:`paco_grpo.pipelines.flux_kontext`) and Qwen-Image-Edit
(:mod:`paco_grpo.pipelines.qwen_image_edit`).

An editing policy denoises the target latents while attending to the reference image's
packed VAE latents, which are appended to the image tokens at every step (and cut off
the prediction again). The samplers read like their diffusers pipelines (check inputs ->
preprocess reference -> encode prompt -> prepare latents -> timesteps -> denoising loop ->
decode), reuse the pipelines' own ``encode_prompt``, VAE encoding, latent packing,
decoding and scheduler config, and share the denoising loop of the text-to-image samplers
(:func:`paco_grpo.pipelines.sampling.sde_denoise`), so with ``noise_level = 0`` they return
what diffusers returns for the same seed.

Reference images are resized preserving their aspect ratio to a target *area*
(:func:`area_preserving_size`; the trainer uses ``resolution**2``) and the edited image
has the reference's size.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from PIL import Image

from paco_grpo.data import PromptItem
from paco_grpo.pipelines.sampling import (
    GRPOSampler,
    SampleOutput,
    check_sampling_inputs,
    sde_denoise,
)
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import flux_schedule
from paco_reward.errors import InputError
from paco_reward.images import ImageInput, image_hash, load_image

logger = logging.getLogger(__name__)

__all__ = [
    "EditConditioning",
    "EditGRPOSampler",
    "area_preserving_size",
    "prepare_edit_items",
    "resize_to_area",
]


# ====================================================================== reference images
def area_preserving_size(width: int, height: int, area: int, multiple: int) -> tuple[int, int]:
    """``(width, height)`` with the aspect ratio of ``width x height``, about ``area`` pixels,
    each side rounded to the nearest multiple of ``multiple`` (at least one multiple).

    Example:
        >>> area_preserving_size(1600, 900, 384 * 384, 16)
        (512, 288)
        >>> area_preserving_size(300, 300, 64 * 64, 16)
        (64, 64)
    """
    if width < 1 or height < 1 or area < 1 or multiple < 1:
        raise InputError(
            f"width, height, area and multiple must be >= 1; got {width}, {height}, {area}, "
            f"{multiple}."
        )
    ratio = width / height
    new_w = max(multiple, round(math.sqrt(area * ratio) / multiple) * multiple)
    new_h = max(multiple, round(math.sqrt(area / ratio) / multiple) * multiple)
    return int(new_w), int(new_h)


def resize_to_area(image: ImageInput, area: int, multiple: int = 16) -> Image.Image:
    """Load ``image`` (anything :func:`paco_reward.images.load_image` accepts) and resize it,
    preserving its aspect ratio, to about ``area`` pixels with sides multiple of ``multiple``
    (Lanczos, the resampling diffusers' ``VaeImageProcessor`` uses).

    Example:
        >>> resize_to_area(Image.new("RGB", (200, 100)), 32 * 32).size
        (48, 16)
    """
    image = load_image(image, "reference image")
    size = area_preserving_size(image.width, image.height, area, multiple)
    return image if size == image.size else image.resize(size, Image.LANCZOS)


def prepare_edit_items(
    items: Sequence[PromptItem], areas: int | Sequence[int], multiple: int = 16
) -> list[PromptItem]:
    """Editing items ready for sampling: ``metadata["source_image"]`` becomes the reference
    resized with :func:`resize_to_area` (what the policy edits, and what editing rewards such
    as ``edit_consistency`` compare the edit with), ``metadata["source_image_hash"]`` the
    :func:`paco_reward.images.image_hash` of the original image (the GRPO group key with the
    prompt id).

    Args:
        items: prompt items with ``metadata["source_image"]`` (the parquet loader's output).
        areas: target area in pixels, one for all items or one per item.
        multiple: image sides are rounded to multiples of this.

    Raises:
        PromptError: an item without a source image.

    Example:
        >>> item = PromptItem("0", "make it red", metadata={"source_image": Image.new("RGB", (120, 60))})
        >>> prepare_edit_items([item], 32 * 32)[0].metadata["source_image"].size
        (48, 16)
    """
    from paco_reward.errors import PromptError

    if isinstance(areas, int):
        areas = [areas] * len(items)
    out = []
    for item, area in zip(items, areas):
        source = item.metadata.get("source_image")
        if source is None:
            raise PromptError(
                f"prompt item {item.id!r} has no metadata['source_image']; editing pipelines need "
                "(prompt, image) parquet prompt data."
            )
        source = load_image(source, f"item {item.id!r} source_image")
        metadata = {
            **item.metadata,
            "source_image": resize_to_area(source, area, multiple),
            "source_image_hash": item.metadata.get("source_image_hash") or image_hash(source),
        }
        out.append(dataclasses.replace(item, metadata=metadata))
    return out


# ====================================================================== samplers
@dataclass
class EditConditioning:
    """Everything one batch of edits is conditioned on.

    Attributes:
        prompt_embeds: text(+image) encoder tokens ``(B, L, D)``.
        image_latents: the references' packed VAE latents ``(B, seq_ref, C)``.
        extras: model-specific conditioning (the text embeddings and position ids for
            Kontext; a :class:`~paco_grpo.pipelines.qwen_image.QwenImageConditioning` for
            Qwen-Image-Edit).
    """

    prompt_embeds: torch.Tensor
    image_latents: torch.Tensor
    extras: dict


class EditGRPOSampler(GRPOSampler):
    """Shared structure of the editing samplers; subclasses fill in the model-specific hooks
    :meth:`condition`, :meth:`prepare_noise`, :meth:`velocity` and :meth:`decode`.

    Args:
        pipe: the diffusers editing pipeline (its transformer may carry a peft LoRA).
        max_sequence_length: text tokens per prompt (T5 for Kontext; unused by Qwen).

    Encodings are cached: prompts per text (or per (text, image) for Qwen-Image-Edit,
    whose text encoder sees the image), reference latents per (image hash, size).
    """

    def __init__(self, pipe, max_sequence_length: int = 512) -> None:
        super().__init__(pipe, max_sequence_length)
        self._prompt_cache: dict = {}
        self._image_cache: dict = {}

    def clear_cache(self) -> None:
        self._prompt_cache.clear()
        self._image_cache.clear()

    # ------------------------------------------------------------------ building blocks
    def reference_size(self, image: Image.Image, area: int | None) -> tuple[int, int]:
        """``(height, width)`` a reference is resized to (``area=None``: its own size, floored
        to :attr:`size_multiple`)."""
        m = self.size_multiple
        if area is None:
            return max(m, image.height // m * m), max(m, image.width // m * m)
        w, h = area_preserving_size(image.width, image.height, area, m)
        return h, w

    def preprocess(self, images: Sequence[Image.Image], height: int, width: int) -> list:
        """Resize references with the pipeline's own image processor (as diffusers does)."""
        return [self.pipe.image_processor.resize(im, height, width) for im in images]

    @torch.no_grad()
    def encode_references(
        self, images: Sequence[Image.Image], device=None, dtype=None
    ) -> torch.Tensor:
        """Packed reference latents ``(B, seq_ref, C)``, VAE-encoded once per distinct image."""
        device = device or self.pipe._execution_device
        dtype = dtype or self.pipe.vae.dtype
        keys = [(image_hash(im), im.size) for im in images]
        for key, im in zip(keys, images):
            if key not in self._image_cache:
                pixels = self.pipe.image_processor.preprocess(im, im.height, im.width)
                self._image_cache[key] = self._encode_reference(pixels.to(device, dtype))[0]
        return torch.stack([self._image_cache[k] for k in keys]).to(device)

    # ------------------------------------------------------------------ model-specific hooks
    def _encode_reference(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(1, 3, H, W)`` pixels in [-1, 1] -> packed latents ``(1, seq_ref, C)``."""
        raise NotImplementedError

    def condition(
        self, prompts: Sequence[str], references: Sequence[Image.Image], height: int, width: int
    ) -> EditConditioning:
        """Encode prompts and (already resized) references for output size ``height x width``."""
        raise NotImplementedError

    def prepare_noise(
        self, batch: int, height: int, width: int, dtype, device, generator, latents
    ) -> torch.Tensor:
        """Packed initial noise ``(B, seq, C)`` drawn as the diffusers pipeline draws it."""
        raise NotImplementedError

    def velocity(
        self,
        transformer,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: EditConditioning,
        guidance_scale: float,
    ) -> torch.Tensor:
        """The (guided) velocity of the target tokens ``latents`` given ``cond``."""
        raise NotImplementedError

    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1]."""
        raise NotImplementedError

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
        """The velocity at recorded ``latents`` of edits of ``references`` (see
        :meth:`GRPOSampler.transition_velocity`)."""
        if references is None:
            raise InputError("an editing sampler re-scores edits: pass the reference images.")
        cond = self.condition(prompts, references, height, width)
        return self.velocity(transformer, latents, timestep, cond, guidance_scale)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def __call__(
        self,
        prompts: Sequence[str],
        images: Sequence[ImageInput],
        area: int | None = None,
        height: int | None = None,
        width: int | None = None,
        num_steps: int = 8,
        guidance_scale: float = 2.5,
        noise_level: float = 0.9,
        noise_steps: Sequence[int] = (1,),
        generator: torch.Generator | None = None,
        latents: torch.Tensor | None = None,
        transformer=None,
        output_type: str = "pt",
        scheduler: FlowGRPOScheduler | None = None,
    ) -> SampleOutput:
        """Edit ``images[k]`` following ``prompts[k]``, one output per pair.

        Args:
            prompts: one edit instruction per output.
            images: one reference image per output (PIL, path, array or tensor). All must
                resize to the same size; the output has that size.
            area: resize each reference, preserving its aspect ratio, to about this many
                pixels (``None``: keep its size, floored to :attr:`size_multiple`).
            height / width: output size; default the resized reference's size (what the
                trainer uses).
            num_steps: denoising steps.
            guidance_scale: Kontext's embedded guidance / Qwen-Image's true-CFG scale.
            noise_level: ``a`` of the SDE steps.
            noise_steps: step indices that take the SDE step (recorded); empty = ODE.
            generator: seeds the initial latents and then the SDE noise.
            latents: optional packed initial latents.
            transformer: the (possibly LoRA-wrapped) transformer; default the pipeline's.
            output_type: ``"pt"`` (decoded images) or ``"latent"``.
            scheduler: the stochastic step (SDE or CPS); default Flow-GRPO's SDE.
        """
        transformer = transformer if transformer is not None else self.pipe.transformer
        # 1. Check inputs
        if len(images) != len(prompts):
            raise InputError(
                f"Got {len(prompts)} prompts but {len(images)} reference images; pass one "
                "reference image per prompt."
            )
        if not prompts:
            raise InputError("prompts is empty; pass at least one (prompt, image) pair.")
        refs = [load_image(im, f"images[{k}]") for k, im in enumerate(images)]
        sizes = {self.reference_size(im, area) for im in refs}
        if len(sizes) != 1:
            raise InputError(
                f"The references resize to different sizes {sorted(sizes)}; sample references "
                "of one size (aspect ratio) per call."
            )
        ref_height, ref_width = sizes.pop()
        height, width = height or ref_height, width or ref_width
        noise_steps = check_sampling_inputs(
            height, width, self.size_multiple, num_steps, noise_steps, output_type
        )
        device = self.pipe._execution_device

        # 2. Preprocess the references; 3. encode prompts and references (cached)
        refs = self.preprocess(refs, ref_height, ref_width)
        cond = self.condition(prompts, refs, height, width)

        # 4. Prepare latents (diffusers' own noise draw)
        latents = self.prepare_noise(
            len(prompts), height, width, cond.prompt_embeds.dtype, device, generator, latents
        )

        # 5. Timesteps (resolution-shifted, from the pipeline's scheduler config)
        schedule = flux_schedule(self.pipe.scheduler, num_steps, latents.shape[1], device=device)

        # 6. Denoising loop (shared with the text-to-image sampler)
        out = sde_denoise(
            lambda x, t: self.velocity(transformer, x, t, cond, guidance_scale),
            latents,
            schedule,
            noise_level,
            noise_steps,
            generator,
            scheduler,
        )

        # 7. Decode
        if output_type != "latent":
            out.images = self.decode(out.latents, height, width)
        return out
