"""FLUX.2 text-to-image: Flow-GRPO sampling on diffusers' ``Flux2Pipeline`` (FLUX.2-dev) and
``Flux2KleinPipeline`` (FLUX.2-klein) components.

Both pipelines share the transformer (``Flux2Transformer2DModel``), the VAE
(``AutoencoderKLFlux2``, whose latents are 2x2-patchified and batch-norm normalised), the
latent packing with 4-D (T, H, W, L) position ids and the schedule (``compute_empirical_mu``:
the shift depends on the token count *and* the number of steps). They differ in the text
encoder (Mistral-Small-3.2 for FLUX.2-dev, Qwen3 for klein: the hidden states of three
layers stacked, through each pipeline's own ``encode_prompt``) and in guidance: FLUX.2-dev
embeds ``guidance_scale`` in the transformer; klein's non-distilled ("base") models run true
classifier-free guidance against an empty negative prompt, its step-distilled ones none.
One sampler, :class:`Flux2GRPOSampler`, serves both; with ``noise_level = 0`` it returns
what the diffusers pipeline returns for the same seed.

    >>> from diffusers import Flux2KleinPipeline
    >>> pipe = Flux2KleinPipeline.from_pretrained("black-forest-labs/FLUX.2-klein-4B")  # doctest: +SKIP
    >>> sampler = Flux2GRPOSampler(pipe)                                                # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=4,
    ...               guidance_scale=1.0, noise_level=0.7, noise_steps=[1])           # doctest: +SKIP
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
from paco_grpo.pipelines.sampling import GRPOSampler, stack_texts
from paco_grpo.timesteps import FluxSchedule, flux_schedule

__all__ = ["FLUX2_LORA_TARGETS", "Flux2Conditioning", "Flux2GRPOSampler"]

# FLUX.2's double-stream projections (feed-forwards named linear_in / linear_out) and the
# single-stream blocks' fused QKV + MLP input projection (FLUX.1's single blocks had
# attn.to_q/k/v).
FLUX2_LORA_TARGETS = (
    *JOINT_ATTENTION_LORA_TARGETS,
    "ff.linear_in",
    "ff.linear_out",
    "ff_context.linear_in",
    "ff_context.linear_out",
    "attn.to_qkv_mlp_proj",
)
# FLUX.2's scheduler config: dynamic shifting, with ``mu`` from the pipeline's
# ``compute_empirical_mu`` (the base/max shift entries are not read).
FLUX2_SCHEDULER_CONFIG = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}


@dataclass
class Flux2Conditioning:
    """FLUX.2 conditioning of a batch: text tokens and their 4-D ids, the image tokens' ids,
    and the negative prompt's tokens when true CFG runs (klein base models)."""

    prompt_embeds: torch.Tensor
    text_ids: torch.Tensor
    img_ids: torch.Tensor
    negative_prompt_embeds: torch.Tensor | None = None


class Flux2GRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions on a ``Flux2Pipeline`` or ``Flux2KleinPipeline``.

    Args:
        pipe: the diffusers pipeline (its transformer may be wrapped with peft LoRA; pass the
            wrapped module as ``transformer=`` to the calls).
        max_sequence_length: text tokens per prompt (512 for both models).
        negative_prompt: the negative prompt of klein's true CFG (diffusers uses ``""``);
            unused by FLUX.2-dev and by step-distilled klein models.

    Prompt encodings are cached per prompt text (the text encoder is frozen).
    """

    default_guidance_scale = 4.0

    def __init__(self, pipe, max_sequence_length: int = 512, negative_prompt: str = "") -> None:
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt

    def true_cfg(self, guidance_scale: float) -> bool:
        """Whether a call with ``guidance_scale`` runs true CFG (a non-distilled klein, > 1),
        as ``Flux2KleinPipeline.do_classifier_free_guidance`` decides."""
        distilled = getattr(self.pipe.config, "is_distilled", None)
        return distilled is False and guidance_scale > 1

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor]:
        """The text tokens of ``prompt`` (three text-encoder layers stacked in the width)."""
        embeds, _ = self.pipe.encode_prompt(
            prompt=[prompt], device=device, max_sequence_length=self.max_sequence_length
        )
        return (embeds[0],)

    def latent_ids(self, batch: int, height: int, width: int, device) -> torch.Tensor:
        """4-D (T, H, W, L) ids ``(B, h * w, 4)`` of the packed image tokens."""
        f = self.size_multiple
        grid = torch.empty(1, 1, height // f, width // f)
        return self.pipe._prepare_latent_ids(grid).expand(batch, -1, -1).to(device)

    def condition(
        self, prompts, height, width, guidance_scale, references=None
    ) -> Flux2Conditioning:
        """The conditioning of ``prompts`` at ``height x width`` as the pipeline builds it."""
        device = self.pipe._execution_device
        embeds = stack_texts(self.encode_prompts(prompts, device), 0, device)
        negative = None
        if self.true_cfg(guidance_scale):
            negatives = self.encode_prompts([self.negative_prompt] * len(prompts), device)
            negative = stack_texts(negatives, 0, device)
        return Flux2Conditioning(
            prompt_embeds=embeds,
            text_ids=self.pipe._prepare_text_ids(embeds).to(device),
            img_ids=self.latent_ids(len(prompts), height, width, device),
            negative_prompt_embeds=negative,
        )

    def prepare_latents(self, batch, height, width, cond, device, generator, latents=None):
        channels = self.pipe.transformer.config.in_channels // 4
        dtype = cond.prompt_embeds.dtype
        return self.pipe.prepare_latents(
            batch, channels, height, width, dtype, device, generator, latents
        )[0]

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        """FLUX.2's schedule: ``compute_empirical_mu`` of the token count and step count."""
        from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

        seq = self.image_seq_len(height, width)
        mu = compute_empirical_mu(image_seq_len=seq, num_steps=num_steps)
        return flux_schedule(self.pipe.scheduler, num_steps, seq, device=device, mu=mu)

    def velocity(self, transformer, latents, timestep, cond: Flux2Conditioning, guidance_scale):
        """The (guided) velocity, called as the diffusers pipeline calls the transformer.

        ``timestep`` is in [0, 1000] (one value or one per sample).
        """
        batch = latents.shape[0]
        timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
        timestep = timestep.to(latents.dtype)
        config = transformer.module.config if hasattr(transformer, "module") else transformer.config
        guidance = None
        if config.guidance_embeds:  # FLUX.2-dev's embedded guidance
            guidance = torch.full([batch], guidance_scale, device=latents.device)

        def forward(embeds):
            return transformer(
                # contiguous: re-scoring passes a strided slice of the recorded latents
                hidden_states=latents.contiguous(),
                timestep=timestep / 1000,
                guidance=guidance,
                encoder_hidden_states=embeds,
                txt_ids=cond.text_ids,
                img_ids=cond.img_ids,
                joint_attention_kwargs={},
                return_dict=False,
            )[0]

        v = forward(cond.prompt_embeds)
        if cond.negative_prompt_embeds is not None:  # klein base: true CFG, no rescaling
            neg = forward(cond.negative_prompt_embeds)
            v = neg + guidance_scale * (v - neg)
        return v

    @staticmethod
    def text_shapes(config: dict[str, Any], max_sequence_length: int) -> list[tuple[int, ...]]:
        """Three text-encoder layers' tokens, stacked in the width."""
        return [(max_sequence_length, config["joint_attention_dim"])]

    @staticmethod
    def meta_inputs(config, batch, image_tokens, text_tokens, reference_tokens, dtype):
        """``Flux2Transformer2DModel``'s arguments as :meth:`velocity` passes them (4-D
        position ids, no pooled text)."""
        meta = {"device": "meta", "dtype": dtype}
        tokens = image_tokens + reference_tokens
        guidance = torch.empty(batch, device="meta") if config.get("guidance_embeds") else None
        return {
            "hidden_states": torch.empty(batch, tokens, config["in_channels"], **meta),
            "timestep": torch.empty(batch, **meta),
            "guidance": guidance,
            "encoder_hidden_states": torch.empty(
                batch, text_tokens, config["joint_attention_dim"], **meta
            ),  # fmt: skip
            "txt_ids": torch.zeros(batch, text_tokens, 4, device="meta"),
            "img_ids": torch.zeros(batch, tokens, 4, device="meta"),
            "joint_attention_kwargs": {},
        }

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Packed latents -> images ``(B, 3, H, W)`` in [0, 1], as the pipelines decode:
        unpack, undo the VAE's batch-norm normalisation, unpatchify, decode."""
        pipe, vae = self.pipe, self.pipe.vae
        f = self.size_multiple
        batch, _, channels = latents.shape
        # the ids are row-major (h, w), so scattering by id is this reshape
        latents = latents.reshape(batch, height // f, width // f, channels).permute(0, 3, 1, 2)
        mean = vae.bn.running_mean.view(1, -1, 1, 1).to(latents.device, latents.dtype)
        std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps)
        latents = latents * std.to(latents.device, latents.dtype) + mean
        latents = pipe._unpatchify_latents(latents)
        image = vae.decode(latents.to(vae.dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(image, output_type="pt")


# FLUX.2-dev: 32 B transformer, Mistral-Small-3.2-24B text encoder (with its vision tower).
FLUX2_DEV_ARCHITECTURE = {
    "transformer": "flux2_dev_transformer.json",
    "vae": "flux2_vae.json",
    "text_encoder": "mistral_small_3_2_24b.json",
}
# FLUX.2-klein 4B, step-distilled and base: one architecture, Qwen3-4B text encoder.
FLUX2_KLEIN_4B_ARCHITECTURE = {
    "transformer": "flux2_klein_4b_transformer.json",
    "vae": "flux2_vae.json",
    "text_encoder": "qwen3_4b.json",
}
register_pipeline(PipelineSpec(
    "flux2", Flux2GRPOSampler, "Flux2Pipeline", lora_target_modules=FLUX2_LORA_TARGETS,
    architectures={"black-forest-labs/FLUX.2-dev": FLUX2_DEV_ARCHITECTURE},
    scheduler_config=FLUX2_SCHEDULER_CONFIG,
    tiny_builder="paco_grpo.testing.flux2:build_tiny_flux2",
))  # fmt: skip
register_pipeline(PipelineSpec(
    "flux2_klein", Flux2GRPOSampler, "Flux2KleinPipeline", true_cfg=True,
    config_kwargs=("max_sequence_length", "negative_prompt"),
    lora_target_modules=FLUX2_LORA_TARGETS, scheduler_config=FLUX2_SCHEDULER_CONFIG,
    architectures={f"black-forest-labs/FLUX.2-klein-{variant}4B": FLUX2_KLEIN_4B_ARCHITECTURE
                   for variant in ("", "base-")},
    tiny_builder="paco_grpo.testing.flux2:build_tiny_flux2_klein",
))  # fmt: skip
