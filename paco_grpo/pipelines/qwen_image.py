"""Qwen-Image text-to-image: Flow-GRPO sampling on diffusers' ``QwenImagePipeline``.

:class:`QwenImageGRPOSampler` reads like ``QwenImagePipeline.__call__`` (check inputs ->
encode prompt -> prepare latents -> timesteps -> denoising loop -> decode) and reuses the
pipeline's own ``encode_prompt`` (Qwen2.5-VL), ``prepare_latents`` (2x2 packing),
scheduler config (the resolution shift ``calculate_shift`` of ``use_dynamic_shifting``) and
VAE, so with ``noise_level = 0`` it returns what ``QwenImagePipeline`` returns for the same
seed. ``guidance_scale`` is Qwen-Image's true classifier-free guidance scale
(``true_cfg_scale``): above 1 each step also runs the transformer on ``negative_prompt``
and takes ``neg + s * (cond - neg)`` rescaled to the conditional prediction's norm.

The pieces Qwen-Image-Edit shares (:mod:`paco_grpo.pipelines.qwen_image_edit`) live here
too: per-text encoder tokens padded into a batch (:func:`pad_prompt_embeds`), the
transformer call with true CFG (:func:`qwen_image_velocity`) and the decoding
(:func:`decode_qwen_image`).

    >>> from diffusers import QwenImagePipeline
    >>> pipe = QwenImagePipeline.from_pretrained("Qwen/Qwen-Image")         # doctest: +SKIP
    >>> sampler = QwenImageGRPOSampler(pipe, negative_prompt=" ")          # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=10,
    ...               guidance_scale=4.0, noise_level=0.7, noise_steps=[1])  # doctest: +SKIP
    >>> out.log_probs.shape                                                 # doctest: +SKIP
    torch.Size([4, 1])
"""

from __future__ import annotations

import contextlib
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
from paco_grpo.timesteps import flux_schedule
from paco_reward.errors import InputError

__all__ = [
    "QwenImageConditioning",
    "QwenImageGRPOSampler",
    "decode_qwen_image",
    "pad_prompt_embeds",
    "qwen_image_velocity",
]

# QwenImagePipeline refuses longer text (its check_inputs).
MAX_SEQUENCE_LENGTH = 1024


# ====================================================================== shared with the edit model
@dataclass
class QwenImageConditioning:
    """What Qwen-Image's transformer is conditioned on, for one batch.

    Attributes:
        prompt_embeds: Qwen2.5-VL tokens ``(B, L, D)``, zero-padded to the batch's longest.
        mask: ``(B, L)`` 1 for a real token, 0 for padding; ``None`` without padding (as
            ``QwenImagePipeline.encode_prompt`` returns it).
        negative_prompt_embeds / negative_mask: the same for the negative prompt of true CFG.
        img_shapes: per sample, ``(frames, rows, columns)`` of each image's latent token grid
            (the target's, then an edit's reference): the transformer's image positions.
    """

    prompt_embeds: torch.Tensor
    mask: torch.Tensor | None
    negative_prompt_embeds: torch.Tensor
    negative_mask: torch.Tensor | None
    img_shapes: list


def pad_prompt_embeds(
    tokens: Sequence[torch.Tensor], device
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-prompt encoder tokens ``(L_k, D)`` as one batch padded to the longest, and the
    mask (``None`` when nothing is padded), exactly as ``QwenImagePipeline.encode_prompt``
    pads a batch it encodes.

    Example:
        >>> embeds, mask = pad_prompt_embeds([torch.ones(2, 4), torch.ones(3, 4)], "cpu")
        >>> embeds.shape, mask.tolist()
        (torch.Size([2, 3, 4]), [[1, 1, 0], [1, 1, 1]])
    """
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


def _forward(transformer, model_input, timestep, embeds, mask, img_shapes, name):
    """One transformer call, as ``QwenImagePipeline`` makes it (in its cache context)."""
    module = transformer.module if hasattr(transformer, "module") else transformer
    context = (
        module.cache_context(name) if hasattr(module, "cache_context") else contextlib.nullcontext()
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


def qwen_image_velocity(
    transformer,
    model_input: torch.Tensor,
    timestep: torch.Tensor,
    cond: QwenImageConditioning,
    guidance_scale: float,
    num_tokens: int | None = None,
) -> torch.Tensor:
    """The true-CFG velocity of Qwen-Image's transformer for the packed tokens
    ``model_input`` ``(B, seq, C)`` (the target's, then an edit's reference's), of which the
    first ``num_tokens`` are kept (default all).

    Above ``guidance_scale`` 1 the prediction for ``cond.negative_prompt_embeds`` is
    combined as ``neg + s * (cond - neg)`` and rescaled to the conditional prediction's
    per-token norm, as ``QwenImagePipeline`` / ``QwenImageEditPipeline`` do.
    ``timestep`` is in [0, 1000] (one value or one per sample).
    """
    batch = model_input.shape[0]
    timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
    timestep = timestep.to(model_input.dtype)
    # contiguous: re-scoring passes a strided slice of the recorded latents (see flux.py)
    model_input = model_input.contiguous()
    v = _forward(
        transformer, model_input, timestep, cond.prompt_embeds, cond.mask, cond.img_shapes, "cond"
    )[:, :num_tokens]
    if guidance_scale > 1:
        neg = _forward(
            transformer,
            model_input,
            timestep,
            cond.negative_prompt_embeds,
            cond.negative_mask,
            cond.img_shapes,
            "uncond",
        )[:, :num_tokens]
        combined = neg + guidance_scale * (v - neg)
        v = combined * (
            torch.norm(v, dim=-1, keepdim=True) / torch.norm(combined, dim=-1, keepdim=True)
        )
    return v


@torch.no_grad()
def decode_qwen_image(pipe, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Packed latents -> images ``(B, 3, H, W)`` in [0, 1], as ``QwenImagePipeline`` decodes
    (Qwen-Image's VAE is a video VAE: one frame, latents de-normalised per channel)."""
    vae = pipe.vae
    latents = pipe._unpack_latents(latents, height, width, pipe.vae_scale_factor)
    latents = latents.to(vae.dtype)
    shape = (1, vae.config.z_dim, 1, 1, 1)
    mean = torch.tensor(vae.config.latents_mean).view(shape).to(latents.device, latents.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(shape).to(
        latents.device, latents.dtype
    )
    latents = latents / inv_std + mean
    image = vae.decode(latents, return_dict=False)[0][:, :, 0]
    return pipe.image_processor.postprocess(image, output_type="pt")


# ====================================================================== the text-to-image sampler
class QwenImageGRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions, on a ``QwenImagePipeline``'s components.

    Args:
        pipe: a ``diffusers.QwenImagePipeline`` (its transformer may carry a peft LoRA).
        max_sequence_length: Qwen2.5-VL tokens kept per prompt (at most 1024).
        negative_prompt: the negative prompt of true CFG (default ``" "``, as Qwen-Image's
            examples use).

    Prompt encodings are cached per prompt text (the text encoder is frozen).
    """

    def __init__(self, pipe, max_sequence_length: int = 512, negative_prompt: str = " ") -> None:
        if max_sequence_length > MAX_SEQUENCE_LENGTH:
            raise InputError(
                f"max_sequence_length must be at most {MAX_SEQUENCE_LENGTH} for Qwen-Image; "
                f"got {max_sequence_length}."
            )
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt
        self._cache: dict[str, torch.Tensor] = {}

    def clear_cache(self) -> None:
        self._cache.clear()

    # ------------------------------------------------------------------ building blocks
    @torch.no_grad()
    def encode_prompts(
        self, prompts: Sequence[str], device=None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Encoder tokens of ``prompts`` padded into a batch, and their mask (``None`` without
        padding); each distinct text is encoded once, alone (see :func:`pad_prompt_embeds`)."""
        device = device or self.pipe._execution_device
        for p in dict.fromkeys(prompts):
            if p not in self._cache:
                embeds, mask = self.pipe.encode_prompt(
                    prompt=[p], device=device, max_sequence_length=self.max_sequence_length
                )
                if mask is not None:
                    embeds = embeds[:, : int(mask[0].sum())]
                self._cache[p] = embeds[0]
        return pad_prompt_embeds([self._cache[p] for p in prompts], device)

    def condition(self, prompts: Sequence[str], height: int, width: int) -> QwenImageConditioning:
        """Encode ``prompts`` and the negative prompt for images of ``height x width``."""
        device = self.pipe._execution_device
        embeds, mask = self.encode_prompts(prompts, device)
        negative, negative_mask = self.encode_prompts([self.negative_prompt] * len(prompts), device)
        f = self.size_multiple
        img_shapes = [[(1, height // f, width // f)]] * len(prompts)
        return QwenImageConditioning(embeds, mask, negative, negative_mask, img_shapes)

    def velocity(
        self,
        transformer,
        latents: torch.Tensor,
        timestep: torch.Tensor,
        cond: QwenImageConditioning,
        guidance_scale: float,
    ) -> torch.Tensor:
        """The (true-CFG) velocity of packed ``latents`` at ``timestep`` in [0, 1000]."""
        return qwen_image_velocity(transformer, latents, timestep, cond, guidance_scale)

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
        cond = self.condition(prompts, height, width)
        return self.velocity(transformer, latents, timestep, cond, guidance_scale)

    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1]."""
        return decode_qwen_image(self.pipe, latents, height, width)

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
            height / width: image size in pixels (multiples of :attr:`size_multiple`).
            num_steps: denoising steps.
            guidance_scale: the true-CFG scale (``true_cfg_scale``; <= 1 disables CFG).
            noise_level: ``a`` of the SDE steps.
            noise_steps: step indices that take the SDE step (and are recorded); every other
                step is the Euler ODE step. Empty = plain ODE sampling.
            generator: seeds the initial latents and then the SDE noise.
            latents: optional packed initial latents.
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

        # 2. Encode the prompts and the negative prompt (cached per text)
        cond = self.condition(prompts, height, width)

        # 3. Prepare latents (diffusers' own noise draw and 2x2 packing)
        num_channels_latents = pipe.transformer.config.in_channels // 4
        latents = pipe.prepare_latents(
            len(prompts),
            num_channels_latents,
            height,
            width,
            cond.prompt_embeds.dtype,
            device,
            generator,
            latents,
        )

        # 4. Timesteps (resolution-shifted, from the pipeline's scheduler config)
        schedule = flux_schedule(pipe.scheduler, num_steps, latents.shape[1], device=device)

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


register_pipeline(
    PipelineSpec(
        "qwen_image",
        QwenImageGRPOSampler,
        "QwenImagePipeline",
        true_cfg=True,
        config_kwargs=("max_sequence_length", "negative_prompt"),
    )
)
