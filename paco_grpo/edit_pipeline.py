"""Flow-GRPO sampling for image editing: FLUX.1-Kontext and Qwen-Image-Edit policies.

An editing policy denoises the target latents while attending to the reference image's
packed VAE latents, which are appended to the image tokens at every step (and cut off
the prediction again). :class:`KontextGRPOSampler` runs on a ``FluxKontextPipeline``'s
components and :class:`QwenImageEditGRPOSampler` on a ``QwenImageEditPipeline``'s; both
read like those pipelines (check inputs -> preprocess reference -> encode prompt ->
prepare latents -> timesteps -> denoising loop -> decode), reuse the pipelines' own
``encode_prompt``, VAE encoding, latent packing, decoding and scheduler config, and share
the denoising loop of the text-to-image sampler (:func:`paco_grpo.pipeline.sde_denoise`),
so with ``noise_level = 0`` they return what diffusers returns for the same seed.

Reference images are resized preserving their aspect ratio to a target *area*
(:func:`area_preserving_size`; the trainer uses ``resolution**2``) and the edited image
has the reference's size.

    >>> from diffusers import FluxKontextPipeline
    >>> pipe = FluxKontextPipeline.from_pretrained("black-forest-labs/FLUX.1-Kontext-dev")  # doctest: +SKIP
    >>> sampler = KontextGRPOSampler(pipe)                                                # doctest: +SKIP
    >>> out = sampler(["make the sky pink"] * 4, [photo] * 4, area=384 * 384, num_steps=8,
    ...               guidance_scale=2.5, noise_level=0.9, noise_steps=[1])              # doctest: +SKIP
    >>> out.log_probs.shape                                                               # doctest: +SKIP
    torch.Size([4, 1])
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from PIL import Image

from paco_grpo.data import PromptItem
from paco_grpo.pipeline import (
    FlowGRPOSampler,
    PromptEmbeddings,
    SampleOutput,
    check_sampling_inputs,
    sde_denoise,
)
from paco_grpo.scheduling_flow_grpo import FlowGRPOScheduler
from paco_grpo.timesteps import flux_schedule
from paco_reward.images import ImageInput, image_hash, load_image

logger = logging.getLogger(__name__)

__all__ = [
    "EDIT_SAMPLERS",
    "EditGRPOSampler",
    "KontextGRPOSampler",
    "QwenImageEditGRPOSampler",
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
        raise ValueError(
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
        extras: model-specific tensors (pooled CLIP embeddings and position ids for
            Kontext; attention masks, negative-prompt embeddings and ``img_shapes`` for
            Qwen-Image-Edit).
    """

    prompt_embeds: torch.Tensor
    image_latents: torch.Tensor
    extras: dict


class EditGRPOSampler:
    """Shared structure of the editing samplers; subclasses fill in the model-specific hooks
    :meth:`condition`, :meth:`prepare_noise`, :meth:`velocity` and :meth:`decode`.

    Args:
        pipe: the diffusers editing pipeline (its transformer may carry a peft LoRA).
        max_sequence_length: text tokens per prompt (T5 for Kontext; unused by Qwen).

    Encodings are cached: prompts per text (or per (text, image) for Qwen-Image-Edit,
    whose text encoder sees the image), reference latents per (image hash, size).
    """

    def __init__(self, pipe, max_sequence_length: int = 512) -> None:
        self.pipe = pipe
        self.max_sequence_length = max_sequence_length
        self._prompt_cache: dict = {}
        self._image_cache: dict = {}

    @property
    def vae_scale_factor(self) -> int:
        return self.pipe.vae_scale_factor

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of this (VAE factor times the 2x2 latent packing)."""
        return self.vae_scale_factor * 2

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
            raise ValueError(
                f"Got {len(prompts)} prompts but {len(images)} reference images; pass one "
                "reference image per prompt."
            )
        if not prompts:
            raise ValueError("prompts is empty; pass at least one (prompt, image) pair.")
        refs = [load_image(im, f"images[{k}]") for k, im in enumerate(images)]
        sizes = {self.reference_size(im, area) for im in refs}
        if len(sizes) != 1:
            raise ValueError(
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


class KontextGRPOSampler(EditGRPOSampler):
    """Flow-GRPO sampling with a ``FluxKontextPipeline`` (FLUX.1-Kontext-dev).

    The text conditioning, the transformer call and the decoding are those of the
    text-to-image :class:`paco_grpo.pipeline.FlowGRPOSampler` (the Kontext pipeline has the
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
        longest = max(t.shape[0] for t in tokens)
        embeds = torch.stack(
            [torch.cat([t, t.new_zeros(longest - t.shape[0], t.shape[1])]) for t in tokens]
        ).to(device)
        mask = torch.stack(
            [
                torch.cat(
                    [torch.ones(t.shape[0], dtype=torch.long), torch.zeros(longest - t.shape[0])]
                ).long()
                for t in tokens
            ]
        ).to(device)
        return embeds, (None if mask.all() else mask)

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
            extras={
                "mask": mask,
                "negative_prompt_embeds": neg,
                "negative_mask": neg_mask,
                "img_shapes": img_shapes,
            },
        )

    def prepare_noise(self, batch, height, width, dtype, device, generator, latents):
        channels = self.pipe.transformer.config.in_channels // 4
        return self.pipe.prepare_latents(
            None, batch, channels, height, width, dtype, device, generator, latents
        )[0]

    def _forward(self, transformer, model_input, timestep, embeds, mask, img_shapes, name):
        module = transformer.module if hasattr(transformer, "module") else transformer
        context = (
            module.cache_context(name)
            if hasattr(module, "cache_context")
            else contextlib.nullcontext()
        )
        with context:
            return transformer(
                hidden_states=model_input,
                timestep=timestep / 1000,
                guidance=None,
                encoder_hidden_states_mask=mask,
                encoder_hidden_states=embeds,
                img_shapes=img_shapes,
                attention_kwargs={},
                return_dict=False,
            )[0]

    def velocity(self, transformer, latents, timestep, cond, guidance_scale):
        batch, seq = latents.shape[:2]
        timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
        timestep = timestep.to(latents.dtype)
        model_input = torch.cat([latents, cond.image_latents.to(latents.dtype)], dim=1)
        x = cond.extras
        v = self._forward(
            transformer,
            model_input,
            timestep,
            cond.prompt_embeds,
            x["mask"],
            x["img_shapes"],
            "cond",
        )[:, :seq]
        if guidance_scale > 1:
            neg = self._forward(
                transformer,
                model_input,
                timestep,
                x["negative_prompt_embeds"],
                x["negative_mask"],
                x["img_shapes"],
                "uncond",
            )[:, :seq]
            combined = neg + guidance_scale * (v - neg)
            v = combined * (
                torch.norm(v, dim=-1, keepdim=True) / torch.norm(combined, dim=-1, keepdim=True)
            )
        return v

    @torch.no_grad()
    def decode(self, latents, height, width):
        pipe, vae = self.pipe, self.pipe.vae
        latents = pipe._unpack_latents(latents, height, width, self.vae_scale_factor)
        latents = latents.to(vae.dtype)
        shape = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean).view(shape).to(latents.device, latents.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(shape).to(
            latents.device, latents.dtype
        )
        latents = latents / inv_std + mean
        image = vae.decode(latents, return_dict=False)[0][:, :, 0]
        return pipe.image_processor.postprocess(image, output_type="pt")


#: ``GRPOConfig.pipeline`` value -> (sampler class, diffusers pipeline class name).
EDIT_SAMPLERS: dict[str, tuple[type, str]] = {
    "flux_kontext": (KontextGRPOSampler, "FluxKontextPipeline"),
    "qwen_image_edit": (QwenImageEditGRPOSampler, "QwenImageEditPipeline"),
}
