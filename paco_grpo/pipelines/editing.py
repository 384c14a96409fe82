"""What the editing policies share: reference images resized to an area, editing prompt
items, and :class:`EditGRPOSampler`, what an editing sampler adds to its model's
text-to-image one (FLUX.1-Kontext: :mod:`paco_grpo.pipelines.flux_kontext`; Qwen-Image-Edit:
:mod:`paco_grpo.pipelines.qwen_image_edit`; Qwen-Image-Edit-Plus, several references:
:mod:`paco_grpo.pipelines.qwen_image_edit_plus`).

An editing policy denoises the target latents while attending to the reference images'
packed VAE latents, which are appended to the image tokens at every step (and cut off
the prediction again). The samplers run the one sampling loop of
:class:`~paco_grpo.pipelines.sampling.GRPOSampler` and reuse the pipelines' own
``encode_prompt``, VAE encoding, latent packing, decoding and scheduler config, so with
``noise_level = 0`` they return what diffusers returns for the same seed.

Reference images are resized preserving their aspect ratio to a target *area*
(:func:`area_preserving_size`; the trainer uses ``resolution**2``) and the edited image
has the (first) reference's size.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence

import torch
from PIL import Image

from paco_grpo.data import PromptItem, edit_references, references_hash
from paco_grpo.pipelines.sampling import GRPOSampler, on_host
from paco_reward.devices import host_to_device
from paco_reward.errors import InputError
from paco_reward.images import ImageInput, image_hash, load_image

logger = logging.getLogger(__name__)

__all__ = [
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
    """Editing items ready for sampling: each reference (:func:`paco_grpo.data.edit_references`:
    ``metadata["source_images"]``, or the one ``metadata["source_image"]``) resized with
    :func:`resize_to_area` into ``metadata["source_images"]``, the first of them also
    ``metadata["source_image"]`` (what the policy edits, whose size the edit has, and what
    editing rewards such as ``edit_consistency`` compare the edit with), and
    ``metadata["source_image_hash"]`` the :func:`paco_grpo.data.references_hash` of the
    originals (the GRPO group key with the prompt id).

    Args:
        items: prompt items with their references (the parquet loader's output).
        areas: target area in pixels, one for all items or one per item.
        multiple: image sides are rounded to multiples of this.

    Raises:
        PromptError: an item without a source image.

    Example:
        >>> item = PromptItem("0", "make it red", metadata={"source_image": Image.new("RGB", (120, 60))})
        >>> prepare_edit_items([item], 32 * 32)[0].metadata["source_image"].size
        (48, 16)
    """
    if isinstance(areas, int):
        areas = [areas] * len(items)
    out = []
    for item, area in zip(items, areas):
        originals = [
            load_image(image, f"item {item.id!r} reference {k}")
            for k, image in enumerate(edit_references(item))
        ]
        resized = [resize_to_area(image, area, multiple) for image in originals]
        metadata = {
            **item.metadata,
            "source_image": resized[0],
            "source_images": resized,
            "source_image_hash": item.metadata.get("source_image_hash")
            or references_hash(originals),
        }
        out.append(dataclasses.replace(item, metadata=metadata))
    return out


# ====================================================================== samplers
class EditGRPOSampler(GRPOSampler):
    """What an editing sampler adds to its model's text-to-image one: reference images.

    An editing model derives from this class and from its text-to-image sampler (so the
    text encoding, the transformer call and the decoding are those), e.g.
    ``class KontextGRPOSampler(EditGRPOSampler, FluxGRPOSampler)``, and fills in
    :meth:`encode_reference` (one reference through the pipeline's VAE, packed) and its
    ``condition`` (the text-to-image conditioning plus the references' latents and
    positions). The references are loaded and resized to the call's ``area`` first (the
    output has the first reference's size); their packed latents are appended to the image
    tokens at every step (:meth:`model_input`) and cut off the prediction again.

    Its arguments are the text-to-image sampler's (``pipe``, ``max_sequence_length``, ...).
    Encodings are cached: prompts per text (or per (text, references) where the text
    encoder sees the images), reference latents per (image hash, size).
    """

    max_references: int | None = 1
    """References per edit the model takes (``None``: any number)."""

    # ------------------------------------------------------------------ references
    def reference_size(self, image: Image.Image, area: int | None) -> tuple[int, int]:
        """``(height, width)`` a reference is resized to (``area=None``: its own size, floored
        to :attr:`size_multiple`)."""
        m = self.size_multiple
        if area is None:
            return max(m, image.height // m * m), max(m, image.width // m * m)
        w, h = area_preserving_size(image.width, image.height, area, m)
        return h, w

    def check_references(self, images, count: int) -> list[list[Image.Image]]:
        """Per prompt, its references loaded as PIL images (one image or a list of them)."""
        if images is None:
            raise InputError(f"{type(self).__name__} edits reference images: pass one per prompt.")
        if len(images) != count:
            raise InputError(
                f"Got {count} prompts but {len(images)} reference images; pass one reference "
                "image (or list of them) per prompt."
            )
        references = []
        for k, item in enumerate(images):
            refs = list(item) if isinstance(item, (list, tuple)) else [item]
            if not refs or (self.max_references is not None and len(refs) > self.max_references):
                most = self.max_references
                allowed = "one or more" if most is None else "one" if most == 1 else f"1 to {most}"
                raise InputError(
                    f"images[{k}] holds {len(refs)} reference images; {type(self).__name__} "
                    f"edits from {allowed} per prompt."
                )
            references.append([load_image(im, f"images[{k}]") for im in refs])
        return references

    def check_inputs(self, prompts, images, height, width, area):
        """The references resized to ``area`` (the pipeline's own resize) and the output
        size: the first references' (they must resize to one size)."""
        references = self.check_references(images, len(prompts))
        sizes = [[self.reference_size(im, area) for im in refs] for refs in references]
        firsts = {s[0] for s in sizes}
        if len(firsts) != 1:
            raise InputError(
                f"The references resize to different sizes {sorted(firsts)}; sample references "
                "of one size (aspect ratio) per call."
            )
        resize = self.pipe.image_processor.resize
        references = [
            [resize(im, h, w) for im, (h, w) in zip(refs, ref_sizes)]
            for refs, ref_sizes in zip(references, sizes)
        ]
        ref_height, ref_width = firsts.pop()
        return references, height or ref_height, width or ref_width

    def prepare_latents(self, batch, height, width, cond, device, generator, latents=None):
        """The editing pipelines' noise draw (their ``prepare_latents`` without an image)."""
        channels = self.pipe.transformer.config.in_channels // 4
        dtype = cond.prompt_embeds.dtype
        return self.pipe.prepare_latents(
            None, batch, channels, height, width, dtype, device, generator, latents
        )[0]

    def encode_reference(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(1, 3, H, W)`` pixels in [-1, 1] -> packed latents ``(1, seq_ref, C)``."""
        raise NotImplementedError

    @torch.no_grad()
    def encode_references(
        self, references: Sequence[Sequence[Image.Image]], device=None, dtype=None
    ) -> torch.Tensor:
        """Per prompt, its references' packed latents one after the other
        ``(B, seq_ref, C)``; each distinct image is VAE-encoded once and kept on the host
        (as the prompt encodings: :meth:`encode_prompts`)."""
        device = torch.device(device or self.pipe._execution_device)
        dtype = dtype or self.pipe.vae.dtype
        keys = [[(image_hash(im), im.size) for im in refs] for refs in references]
        for item_keys, refs in zip(keys, references):
            for key, im in zip(item_keys, refs):
                if key not in self._image_cache:
                    pixels = self.pipe.image_processor.preprocess(im, im.height, im.width)
                    latents = self.encode_reference(pixels.to(device, dtype))[0]
                    self._image_cache[key] = on_host(latents, device)
        distinct = dict.fromkeys(k for item_keys in keys for k in item_keys)
        batch = {k: host_to_device(self._image_cache[k], device) for k in distinct}
        return torch.stack([torch.cat([batch[k] for k in item_keys]) for item_keys in keys])
