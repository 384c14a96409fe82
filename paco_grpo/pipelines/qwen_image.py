"""Qwen-Image text-to-image: Flow-GRPO sampling on diffusers' ``QwenImagePipeline``.

:class:`QwenImageGRPOSampler` fills in the hooks of the one sampling loop
(:class:`~paco_grpo.pipelines.sampling.GRPOSampler`) with the pipeline's own
``encode_prompt`` (Qwen2.5-VL), ``prepare_latents`` (2x2 packing), scheduler config (the
resolution shift ``calculate_shift`` of ``use_dynamic_shifting``) and VAE, so with
``noise_level = 0`` it returns what ``QwenImagePipeline`` returns for the same seed.
``guidance_scale`` is Qwen-Image's true classifier-free guidance scale (``true_cfg_scale``):
above 1 each step also runs the transformer on ``negative_prompt`` and takes
``neg + s * (cond - neg)`` rescaled to the conditional prediction's norm.

The editing models derive from it (:mod:`paco_grpo.pipelines.qwen_image_edit`,
:mod:`~paco_grpo.pipelines.qwen_image_edit_plus`) and share its pieces: per-text encoder
tokens padded into a batch (:func:`pad_prompt_embeds`), the transformer call with true CFG
(:func:`qwen_image_velocity`) and the decoding (:func:`decode_qwen_image`).

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
from typing import Any

import torch

from paco_grpo.pipelines.registry import (
    JOINT_ATTENTION_LORA_TARGETS,
    PipelineSpec,
    register_pipeline,
)
from paco_grpo.pipelines.sampling import GRPOSampler
from paco_reward.errors import InputError

__all__ = [
    "QWEN_IMAGE_LORA_TARGETS",
    "QwenImageConditioning",
    "QwenImageGRPOSampler",
    "decode_qwen_image",
    "pad_prompt_embeds",
    "qwen_image_velocity",
    "unpad_prompt_embeds",
]

# QwenImagePipeline refuses longer text (its check_inputs).
MAX_SEQUENCE_LENGTH = 1024
# The joint-attention projections and the image / text MLPs (img_mlp / txt_mlp) of Qwen-Image's
# dual-stream blocks.
QWEN_IMAGE_LORA_TARGETS = (
    *JOINT_ATTENTION_LORA_TARGETS,
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
)
# Qwen/Qwen-Image's (and Qwen/Qwen-Image-Edit's) scheduler/scheduler_config.json.
QWEN_IMAGE_SCHEDULER_CONFIG = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "invert_sigmas": False,
    "max_image_seq_len": 8192,
    "max_shift": 0.9,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.02,
    "stochastic_sampling": False,
    "time_shift_type": "exponential",
    "use_beta_sigmas": False,
    "use_dynamic_shifting": True,
    "use_exponential_sigmas": False,
    "use_karras_sigmas": False,
}
# Qwen-Image's components: its text encoder is Qwen2.5-VL-7B-Instruct, the evaluator's base
# (shipped with paco_reward). The editing models (Qwen-Image-Edit, -2509) have the same.
QWEN_IMAGE_ARCHITECTURE = {
    "transformer": "qwen_image_transformer.json",
    "vae": "qwen_image_vae.json",
    "text_encoder": "reward:qwen2_5_vl_7b.json",
}


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
            (the target's, then an edit's references): the transformer's image positions.
        image_latents: an edit's packed reference latents ``(B, seq_ref, C)``, else ``None``.
    """

    prompt_embeds: torch.Tensor
    mask: torch.Tensor | None
    negative_prompt_embeds: torch.Tensor
    negative_mask: torch.Tensor | None
    img_shapes: list
    image_latents: torch.Tensor | None = None


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

    default_guidance_scale = 4.0

    def __init__(self, pipe, max_sequence_length: int = 512, negative_prompt: str = " ") -> None:
        if max_sequence_length > MAX_SEQUENCE_LENGTH:
            raise InputError(
                f"max_sequence_length must be at most {MAX_SEQUENCE_LENGTH} for Qwen-Image; "
                f"got {max_sequence_length}."
            )
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor]:
        """``prompt``'s Qwen2.5-VL tokens (its padding cut off)."""
        embeds, mask = self.pipe.encode_prompt(
            prompt=[prompt], device=device, max_sequence_length=self.max_sequence_length
        )
        return (unpad_prompt_embeds(embeds, mask),)

    def image_shapes(self, height: int, width: int, references=None) -> list:
        """Per image token grid ``(frames, rows, columns)``: the target's, then each
        reference's (the transformer's image positions)."""
        f = self.size_multiple
        return [(1, height // f, width // f)]

    def condition(self, prompts, height, width, guidance_scale, references=None):
        """The prompts' and the negative prompt's tokens (with an edit's references, where
        the text encoder sees them), the image grids; an edit adds its reference latents."""
        device = self.pipe._execution_device
        embeds, mask = pad_prompt_embeds(
            [t[0] for t in self.encode_prompts(prompts, device, references)], device
        )
        negatives = self.encode_prompts([self.negative_prompt] * len(prompts), device, references)
        negative, negative_mask = pad_prompt_embeds([t[0] for t in negatives], device)
        first = None if references is None else references[0]
        img_shapes = [self.image_shapes(height, width, first)] * len(prompts)
        return QwenImageConditioning(embeds, mask, negative, negative_mask, img_shapes)

    def prepare_latents(self, batch, height, width, cond, device, generator, latents=None):
        channels = self.pipe.transformer.config.in_channels // 4
        dtype = cond.prompt_embeds.dtype
        return self.pipe.prepare_latents(
            batch, channels, height, width, dtype, device, generator, latents
        )

    def velocity(self, transformer, latents, timestep, cond, guidance_scale) -> torch.Tensor:
        """The (true-CFG) velocity of the packed ``latents`` (an edit's reference tokens are
        appended, then cut off each prediction, as the pipelines do)."""
        return qwen_image_velocity(
            transformer,
            self.model_input(latents, cond),
            timestep,
            cond,
            guidance_scale,
            num_tokens=latents.shape[1],
        )

    @staticmethod
    def text_shapes(config: dict[str, Any], max_sequence_length: int) -> list[tuple[int, ...]]:
        """The Qwen2.5-VL tokens."""
        return [(max_sequence_length, config["joint_attention_dim"])]

    @staticmethod
    def meta_inputs(config, batch, image_tokens, text_tokens, reference_tokens, dtype):
        """``QwenImageTransformer2DModel``'s arguments as :meth:`velocity` passes them (an
        edit's reference of the target's size after the target's tokens)."""
        meta = {"device": "meta", "dtype": dtype}
        side = int(image_tokens**0.5)
        shapes = [[(1, side, side)] + ([(1, side, side)] if reference_tokens else [])] * batch
        tokens = image_tokens + reference_tokens
        return {
            "hidden_states": torch.empty(batch, tokens, config["in_channels"], **meta),
            "timestep": torch.empty(batch, **meta),
            "guidance": None,
            "encoder_hidden_states": torch.empty(
                batch, text_tokens, config["joint_attention_dim"], **meta
            ),  # fmt: skip
            "encoder_hidden_states_mask": torch.ones(
                batch, text_tokens, device="meta", dtype=torch.long
            ),  # fmt: skip
            "img_shapes": shapes,
            "attention_kwargs": {},
        }

    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1]."""
        return decode_qwen_image(self.pipe, latents, height, width)


def unpad_prompt_embeds(embeds: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The one prompt's encoder tokens of ``encode_prompt``'s batch of one, padding cut off
    (:func:`pad_prompt_embeds` pads them into a batch again)."""
    if mask is not None:
        embeds = embeds[:, : int(mask[0].sum())]
    return embeds[0]


register_pipeline(PipelineSpec(
    "qwen_image", QwenImageGRPOSampler, "QwenImagePipeline", true_cfg=True,
    config_kwargs=("max_sequence_length", "negative_prompt"),
    lora_target_modules=QWEN_IMAGE_LORA_TARGETS, scheduler_config=QWEN_IMAGE_SCHEDULER_CONFIG,
    architectures={"Qwen/Qwen-Image": QWEN_IMAGE_ARCHITECTURE},
    tiny_builder="paco_grpo.testing.qwen_image:build_tiny_qwen_image",
))  # fmt: skip
