"""FLUX.1-dev text-to-image: Flow-GRPO sampling on diffusers' ``FluxPipeline`` components.

:class:`FluxGRPOSampler` fills in the hooks of the one sampling loop
(:class:`~paco_grpo.pipelines.sampling.GRPOSampler`) with the pipeline's own
``encode_prompt`` (T5 tokens and pooled CLIP), ``prepare_latents`` (2x2 packing), position
ids, scheduler config (the resolution shift) and VAE decode, so with ``noise_level = 0`` it
returns what ``FluxPipeline`` returns for the same seed. ``guidance_scale`` is FLUX.1-dev's
embedded guidance.

    >>> from diffusers import FluxPipeline
    >>> pipe = FluxPipeline.from_pretrained("black-forest-labs/FLUX.1-dev")   # doctest: +SKIP
    >>> sampler = FluxGRPOSampler(pipe)                                       # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=10,
    ...               noise_level=0.7, noise_steps=[1])                       # doctest: +SKIP
    >>> out.log_probs.shape                                                   # doctest: +SKIP
    torch.Size([4, 1])
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

__all__ = ["FLUX_LORA_TARGETS", "FluxConditioning", "FluxGRPOSampler"]

# Attention and feed-forward projections of FLUX's double-stream blocks (Flow-GRPO's choice).
FLUX_LORA_TARGETS = (
    *JOINT_ATTENTION_LORA_TARGETS,
    "ff.net.0.proj",
    "ff.net.2",
    "ff_context.net.0.proj",
    "ff_context.net.2",
)
# black-forest-labs/FLUX.1-dev's scheduler/scheduler_config.json.
FLUX_DEV_SCHEDULER_CONFIG = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}
# FLUX.1-dev's components; FLUX.1-Kontext-dev has the same (the reference image is more
# tokens, not more weights).
FLUX1_ARCHITECTURE = {
    "transformer": "flux1_transformer.json",
    "vae": "flux1_vae.json",
    "text_encoder": "clip_vit_l_14_text.json",
    "text_encoder_2": "t5_v1_1_xxl_encoder.json",
}


@dataclass
class FluxConditioning:
    """FLUX conditioning of a batch: T5 tokens, pooled CLIP, the text and image position ids,
    and an edit's reference latents (appended to the image tokens).

    Attributes:
        prompt_embeds: T5 tokens ``(B, L, D)``.
        pooled_prompt_embeds: pooled CLIP ``(B, P)``.
        text_ids: ``(L, 3)`` text position ids (zeros, as ``FluxPipeline``).
        img_ids: ``(seq, 3)`` position ids of the image tokens (an edit's reference tokens
            after the target's).
        image_latents: an edit's packed reference latents ``(B, seq_ref, C)``, else ``None``.
    """

    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    text_ids: torch.Tensor
    img_ids: torch.Tensor
    image_latents: torch.Tensor | None = None


class FluxGRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions, on a ``FluxPipeline``'s components.

    Args:
        pipe: a ``diffusers.FluxPipeline`` (its transformer may be wrapped with peft LoRA;
            pass the wrapped module as ``transformer=`` to the calls).
        max_sequence_length: T5 tokens per prompt (512 for FLUX.1-dev).

    Prompt encodings are cached per prompt text (the text encoders are frozen).
    """

    default_guidance_scale = 3.5

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(T5 tokens, pooled CLIP)`` of ``prompt`` from the pipeline's ``encode_prompt``."""
        embeds, pooled, _ = self.pipe.encode_prompt(
            prompt=[prompt], prompt_2=None, device=device,
            max_sequence_length=self.max_sequence_length,
        )  # fmt: skip
        return embeds[0], pooled[0]

    def latent_ids(self, height: int, width: int, device, dtype) -> torch.Tensor:
        """Position ids ``(seq, 3)`` of the packed image tokens, as ``prepare_latents`` makes them."""
        f = self.size_multiple
        return self.pipe._prepare_latent_image_ids(1, height // f, width // f, device, dtype)

    def condition(
        self, prompts, height, width, guidance_scale, references=None
    ) -> FluxConditioning:
        device = self.pipe._execution_device
        texts = self.encode_prompts(prompts, device)
        embeds = stack_texts(texts, 0, device)
        return FluxConditioning(
            prompt_embeds=embeds,
            pooled_prompt_embeds=stack_texts(texts, 1, device),
            text_ids=torch.zeros(embeds.shape[1], 3, device=device, dtype=embeds.dtype),
            img_ids=self.latent_ids(height, width, device, embeds.dtype),
        )

    def prepare_latents(self, batch, height, width, cond, device, generator, latents=None):
        channels = self.pipe.transformer.config.in_channels // 4
        dtype = cond.prompt_embeds.dtype
        return self.pipe.prepare_latents(
            batch, channels, height, width, dtype, device, generator, latents
        )[0]

    def velocity(self, transformer, latents, timestep, cond: FluxConditioning, guidance_scale):
        """The transformer's velocity, called exactly as ``FluxPipeline`` calls it (an edit's
        reference tokens are appended, then cut off the prediction)."""
        batch = latents.shape[0]
        timestep = timestep.expand(batch).to(latents.dtype) if timestep.ndim == 0 else timestep
        guidance = None
        config = transformer.module.config if hasattr(transformer, "module") else transformer.config
        if config.guidance_embeds:
            guidance = torch.full([1], guidance_scale, device=latents.device, dtype=torch.float32)
            guidance = guidance.expand(batch)
        v = transformer(
            # contiguous: in bf16, nn.Linear rounds a strided input differently (matmul, then
            # + bias) from a contiguous one (fused addmm), and re-scoring passes a strided
            # slice of the recorded latents where sampling passed a contiguous tensor.
            hidden_states=self.model_input(latents, cond).contiguous(),
            timestep=timestep.to(latents.dtype) / 1000,
            guidance=guidance,
            pooled_projections=cond.pooled_prompt_embeds,
            encoder_hidden_states=cond.prompt_embeds,
            txt_ids=cond.text_ids,
            img_ids=cond.img_ids,
            joint_attention_kwargs={},
            return_dict=False,
        )[0]
        return v[:, : latents.shape[1]]

    @staticmethod
    def text_shapes(config: dict[str, Any], max_sequence_length: int) -> list[tuple[int, ...]]:
        """T5 tokens, pooled CLIP."""
        return [
            (max_sequence_length, config["joint_attention_dim"]),
            (config["pooled_projection_dim"],),
        ]

    @staticmethod
    def meta_inputs(config, batch, image_tokens, text_tokens, reference_tokens, dtype):
        """``FluxTransformer2DModel``'s arguments as :meth:`velocity` passes them."""
        meta = {"device": "meta", "dtype": dtype}
        tokens = image_tokens + reference_tokens
        guidance = torch.empty(batch, device="meta") if config.get("guidance_embeds") else None
        return {
            "hidden_states": torch.empty(batch, tokens, config["in_channels"], **meta),
            "timestep": torch.empty(batch, **meta),
            "guidance": guidance,
            "pooled_projections": torch.empty(batch, config["pooled_projection_dim"], **meta),
            "encoder_hidden_states": torch.empty(
                batch, text_tokens, config["joint_attention_dim"], **meta
            ),  # fmt: skip
            "txt_ids": torch.zeros(text_tokens, 3, device="meta"),
            "img_ids": torch.zeros(tokens, 3, device="meta"),
            "joint_attention_kwargs": {},
        }

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1], as ``FluxPipeline`` decodes."""
        latents = self.pipe._unpack_latents(latents, height, width, self.vae_scale_factor)
        return decode_scaled_latents(self.pipe, latents)


register_pipeline(PipelineSpec(
    "flux", FluxGRPOSampler, "FluxPipeline", lora_target_modules=FLUX_LORA_TARGETS,
    architectures={"black-forest-labs/FLUX.1-dev": FLUX1_ARCHITECTURE},
    scheduler_config=FLUX_DEV_SCHEDULER_CONFIG,
    tiny_builder="paco_grpo.testing.flux:build_tiny_flux",
))  # fmt: skip
