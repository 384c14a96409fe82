"""Stable Diffusion 3 / 3.5 text-to-image: Flow-GRPO sampling on diffusers'
``StableDiffusion3Pipeline`` components.

:class:`SD3GRPOSampler` fills in the hooks of the one sampling loop
(:class:`~paco_grpo.pipelines.sampling.GRPOSampler`) with the pipeline's own
``encode_prompt`` (CLIP-L and CLIP-G hidden states side by side, zero-padded to T5's width
and followed by the T5 tokens; the two pooled CLIP projections concatenated),
``prepare_latents`` (unpacked ``(B, 16, H/8, W/8)`` latents: the transformer patchifies),
scheduler config (a static shift of 3.0 for SD3.5, :func:`paco_grpo.timesteps.sd3_schedule`)
and VAE decode, so with ``noise_level = 0`` it returns what ``StableDiffusion3Pipeline``
returns for the same seed. ``guidance_scale`` is classifier-free guidance as the pipeline
runs it: above 1 one transformer call on the batch ``[negative; prompt]`` and
``neg + s * (cond - neg)``; 4.5 for SD3.5 Large, 3.5 for Medium (their model cards).

    >>> from diffusers import StableDiffusion3Pipeline
    >>> pipe = StableDiffusion3Pipeline.from_pretrained(
    ...     "stabilityai/stable-diffusion-3.5-large")                        # doctest: +SKIP
    >>> sampler = SD3GRPOSampler(pipe, max_sequence_length=256)                # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=10,
    ...               guidance_scale=4.5, noise_level=0.7, noise_steps=[1])  # doctest: +SKIP
    >>> out.noise_latents.shape                                               # doctest: +SKIP
    torch.Size([4, 1, 16, 64, 64])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from paco_grpo.pipelines.registry import (
    JOINT_ATTENTION_LORA_TARGETS,
    PipelineSpec,
    register_pipeline,
)
from paco_grpo.pipelines.sampling import GRPOSampler, decode_scaled_latents, stack_texts
from paco_grpo.timesteps import FluxSchedule, sd3_schedule

__all__ = ["SD3Conditioning", "SD3GRPOSampler"]

# stabilityai/stable-diffusion-3.5-large's scheduler/scheduler_config.json (Medium's is the
# same): a static shift, no dynamic shifting.
SD35_SCHEDULER_CONFIG = {"num_train_timesteps": 1000, "shift": 3.0}
# Stable Diffusion 3.5 Large: CLIP-L and OpenCLIP bigG text towers with their projections, and
# the T5 v1.1 XXL encoder FLUX.1-dev also uses.
SD35_LARGE_ARCHITECTURE = {
    "transformer": "sd35_large_transformer.json",
    "vae": "sd35_vae.json",
    "text_encoder": "clip_vit_l_14_text_projection.json",
    "text_encoder_2": "clip_vit_bigg_14_text_projection.json",
    "text_encoder_3": "t5_v1_1_xxl_encoder.json",
}
CLIP_TOKENS = 77  # CLIP-L's and CLIP-G's tokens before the T5 ones


@dataclass
class SD3Conditioning:
    """SD3 conditioning of a batch: the CLIP + T5 tokens and the pooled CLIP projections, and
    the negative prompt's when classifier-free guidance runs."""

    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    negative_prompt_embeds: torch.Tensor | None = None
    negative_pooled_prompt_embeds: torch.Tensor | None = None


class SD3GRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions, on a ``StableDiffusion3Pipeline``'s components.

    Latents stay unpacked, ``(B, C, H/8, W/8)``: ``SampleOutput.noise_latents`` is
    ``(B, S, C, H/8, W/8)``, and the step's log-probability is the mean over those elements.

    Args:
        pipe: a ``diffusers.StableDiffusion3Pipeline`` (its transformer may carry a peft LoRA;
            pass the wrapped module as ``transformer=`` to the calls).
        max_sequence_length: T5 tokens per prompt (256 is the pipeline's default; at most 512).
        negative_prompt: the negative prompt of classifier-free guidance (the pipeline's
            default is the empty prompt).

    Prompt encodings are cached per prompt text (the text encoders are frozen).
    """

    default_guidance_scale = 4.5

    def __init__(self, pipe, max_sequence_length: int = 256, negative_prompt: str = "") -> None:
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt

    @property
    def size_multiple(self) -> int:
        """Image sides must be multiples of the VAE factor times the transformer's patch."""
        return self.vae_scale_factor * self.pipe.transformer.config.patch_size

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(CLIP-L | CLIP-G padded, then T5 tokens; pooled CLIP-L + G)`` of ``prompt``."""
        embeds, _, pooled, _ = self.pipe.encode_prompt(
            prompt=[prompt], prompt_2=None, prompt_3=None, device=device,
            do_classifier_free_guidance=False, max_sequence_length=self.max_sequence_length,
        )  # fmt: skip
        return embeds[0], pooled[0]

    def condition(self, prompts, height, width, guidance_scale, references=None) -> SD3Conditioning:
        """The prompts' encodings, and the negative prompt's when guidance is above 1."""
        device = self.pipe._execution_device
        texts = self.encode_prompts(prompts, device)
        cond = SD3Conditioning(stack_texts(texts, 0, device), stack_texts(texts, 1, device))
        if guidance_scale > 1:
            negative = self.encode_prompts([self.negative_prompt] * len(prompts), device)
            cond.negative_prompt_embeds = stack_texts(negative, 0, device)
            cond.negative_pooled_prompt_embeds = stack_texts(negative, 1, device)
        return cond

    def prepare_latents(self, batch, height, width, cond, device, generator, latents=None):
        channels = self.pipe.transformer.config.in_channels
        dtype = cond.prompt_embeds.dtype
        return self.pipe.prepare_latents(
            batch, channels, height, width, dtype, device, generator, latents
        )

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        """The pipeline's schedule (:func:`paco_grpo.timesteps.sd3_schedule`)."""
        seq = self.image_seq_len(height, width)
        return sd3_schedule(self.pipe.scheduler, num_steps, seq, device=device)

    def velocity(self, transformer, latents, timestep, cond: SD3Conditioning, guidance_scale):
        """The (guided) velocity, called exactly as ``StableDiffusion3Pipeline`` calls it:
        with guidance above 1, one call on ``[negative; prompt]`` and the CFG combination.
        SD3's transformer takes the timestep in [0, 1000] as is."""
        batch = latents.shape[0]
        timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
        embeds, pooled = cond.prompt_embeds, cond.pooled_prompt_embeds
        # contiguous: a strided slice of the recorded latents rounds differently in bf16
        # (see FluxGRPOSampler.velocity).
        model_input = latents.contiguous()
        cfg = guidance_scale > 1
        if cfg:
            embeds = torch.cat([cond.negative_prompt_embeds, embeds])
            pooled = torch.cat([cond.negative_pooled_prompt_embeds, pooled])
            model_input = torch.cat([model_input] * 2)
            timestep = torch.cat([timestep] * 2)
        v = transformer(
            hidden_states=model_input,
            timestep=timestep,
            encoder_hidden_states=embeds,
            pooled_projections=pooled,
            joint_attention_kwargs=None,
            return_dict=False,
        )[0]
        if cfg:
            uncond, text = v.chunk(2)
            v = uncond + guidance_scale * (text - uncond)
        return v

    @staticmethod
    def text_shapes(config: dict[str, Any], max_sequence_length: int) -> list[tuple[int, ...]]:
        """CLIP-L's and CLIP-G's 77 tokens (zero-padded to T5's width) before the T5 ones,
        the pooled CLIP-L + G projections."""
        return [
            (CLIP_TOKENS + max_sequence_length, config["joint_attention_dim"]),
            (config["pooled_projection_dim"],),
        ]

    @staticmethod
    def meta_inputs(config, batch, image_tokens, text_tokens, reference_tokens, dtype):
        """``SD3Transformer2DModel``'s arguments as :meth:`velocity` passes them: unpacked
        latents (the transformer patchifies), 77 CLIP tokens before the T5 ones."""
        meta = {"device": "meta", "dtype": dtype}
        side = int(image_tokens**0.5) * config["patch_size"]
        text = CLIP_TOKENS + text_tokens
        return {
            "hidden_states": torch.empty(batch, config["in_channels"], side, side, **meta),
            "timestep": torch.empty(batch, **meta),
            "encoder_hidden_states": torch.empty(
                batch, text, config["joint_attention_dim"], **meta
            ),
            "pooled_projections": torch.empty(batch, config["pooled_projection_dim"], **meta),
        }

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Latents -> images ``(B, 3, H, W)`` in [0, 1], as ``StableDiffusion3Pipeline``
        decodes (``latents / scaling_factor + shift_factor``)."""
        return decode_scaled_latents(self.pipe, latents)


register_pipeline(PipelineSpec(
    "sd3", SD3GRPOSampler, "StableDiffusion3Pipeline", true_cfg=True,
    # the joint-attention projections (Flow-GRPO's SD3.5 setting)
    lora_target_modules=JOINT_ATTENTION_LORA_TARGETS, scheduler_config=SD35_SCHEDULER_CONFIG,
    architectures={"stabilityai/stable-diffusion-3.5-large": SD35_LARGE_ARCHITECTURE},
    tiny_builder="paco_grpo.testing.sd3:build_tiny_sd3",
    config_kwargs=("max_sequence_length", "negative_prompt"),
))  # fmt: skip
