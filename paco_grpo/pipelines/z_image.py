"""Z-Image text-to-image: Flow-GRPO sampling on diffusers' ``ZImagePipeline``.

Z-Image (Tongyi-MAI, 6 B) is a single-stream DiT: the Qwen3-4B text tokens (its
second-to-last hidden layer, one variable-length list per prompt) and the image patches run
through the same blocks. :class:`ZImageGRPOSampler` fills in the hooks of the one sampling
loop (:class:`~paco_grpo.pipelines.sampling.GRPOSampler`) with what differs from FLUX:

- the pipeline's own ``encode_prompt`` and ``prepare_latents`` (float32 latents
  ``(B, 16, H/8, W/8)``, unpacked: the transformer patchifies them 2x2);
- its schedule: ``torch.linspace`` sigmas (float32, not FLUX's numpy ones), shifted by the
  scheduler config (Z-Image-Turbo's: a static shift of 3);
- its transformer call: lists of latents and of prompt tokens, the timestep as
  ``(1000 - t) / 1000``, and the prediction negated (the model predicts ``x0 - noise``);
  classifier-free guidance ``pos + s * (pos - neg)`` runs above a guidance of 0, as
  ``ZImagePipeline`` runs it (Z-Image-Turbo samples at 0: no CFG); its ``cfg_normalization``
  and ``cfg_truncation`` options are left at their defaults (off);
- FLUX.1's VAE decode (cast to the VAE's dtype first, as the pipeline does).

With ``noise_level = 0`` it returns what ``ZImagePipeline`` returns for the same seed.

    >>> from diffusers import ZImagePipeline
    >>> pipe = ZImagePipeline.from_pretrained("Tongyi-MAI/Z-Image-Turbo")   # doctest: +SKIP
    >>> sampler = ZImageGRPOSampler(pipe)                                   # doctest: +SKIP
    >>> out = sampler(["a fox, 2x2 grid"] * 4, height=512, width=512, num_steps=8,
    ...               guidance_scale=0.0, noise_level=0.7, noise_steps=[1])  # doctest: +SKIP
    >>> out.noise_latents.shape                                             # doctest: +SKIP
    torch.Size([4, 1, 16, 64, 64])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline
from paco_grpo.pipelines.sampling import GRPOSampler, decode_scaled_latents
from paco_grpo.timesteps import FluxSchedule, flux_schedule

__all__ = ["ZImageConditioning", "ZImageGRPOSampler"]

# The attention and SwiGLU feed-forward projections of every block (the 30 main layers and the
# noise and context refiners).
Z_IMAGE_LORA_TARGETS = (
    "attention.to_q",
    "attention.to_k",
    "attention.to_v",
    "attention.to_out.0",
    "feed_forward.w1",
    "feed_forward.w2",
    "feed_forward.w3",
)
# Tongyi-MAI/Z-Image-Turbo's scheduler/scheduler_config.json: a static shift.
Z_IMAGE_TURBO_SCHEDULER_CONFIG = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": False,
}
# Z-Image-Turbo's components: its 6 B transformer, FLUX.1's VAE and Qwen3-4B (FLUX.2-klein's
# text encoder too).
Z_IMAGE_TURBO_ARCHITECTURE = {
    "transformer": "z_image_turbo_transformer.json",
    "vae": "flux1_vae.json",
    "text_encoder": "qwen3_4b.json",
}


@dataclass
class ZImageConditioning:
    """Z-Image conditioning of a batch: each prompt's text tokens ``(L_k, D)`` (no padding),
    and the negative prompt's when classifier-free guidance runs."""

    prompt_embeds: list[torch.Tensor]
    negative_prompt_embeds: list[torch.Tensor] | None = None


class ZImageGRPOSampler(GRPOSampler):
    """Sampling with recorded SDE transitions, on a ``ZImagePipeline``'s components.

    Latents stay unpacked, ``(B, C, H/8, W/8)`` in float32 (as the pipeline keeps them):
    ``SampleOutput.noise_latents`` is ``(B, S, C, H/8, W/8)``.

    Args:
        pipe: a ``diffusers.ZImagePipeline`` (its transformer may carry a peft LoRA).
        max_sequence_length: text tokens per prompt (512, the pipeline's default).
        negative_prompt: the negative prompt of classifier-free guidance (the pipeline's
            default is ``""``).

    Prompt encodings are cached per prompt text (the text encoder is frozen).
    """

    default_guidance_scale = 0.0  # Z-Image-Turbo's

    def __init__(self, pipe, max_sequence_length: int = 512, negative_prompt: str = "") -> None:
        super().__init__(pipe, max_sequence_length)
        self.negative_prompt = negative_prompt

    def encode_text(self, prompt, device, references=None) -> tuple[torch.Tensor]:
        """``prompt``'s Qwen3 tokens (its padding cut off, as the pipeline cuts it)."""
        embeds, _ = self.pipe.encode_prompt(
            prompt=[prompt], device=device, do_classifier_free_guidance=False,
            max_sequence_length=self.max_sequence_length,
        )  # fmt: skip
        return (embeds[0],)

    def condition(self, prompts, height, width, guidance_scale, references=None):
        """The prompts' tokens, and the negative prompt's when guidance is above 0 (as
        ``ZImagePipeline.do_classifier_free_guidance`` decides)."""
        device = self.pipe._execution_device
        cond = ZImageConditioning([t[0] for t in self.encode_prompts(prompts, device)])
        if guidance_scale > 0:
            negatives = self.encode_prompts([self.negative_prompt] * len(prompts), device)
            cond.negative_prompt_embeds = [t[0] for t in negatives]
        return cond

    def prepare_latents(self, batch, height, width, cond, device, generator, latents=None):
        channels = self.pipe.transformer.config.in_channels
        return self.pipe.prepare_latents(
            batch, channels, height, width, torch.float32, device, generator, latents
        )

    def schedule(self, height: int, width: int, num_steps: int, device=None) -> FluxSchedule:
        """The pipeline's float32 linspace sigmas, shifted by its scheduler config."""
        sigmas = torch.linspace(1.0, 1 / num_steps, num_steps).tolist()
        seq = self.image_seq_len(height, width)
        return flux_schedule(self.pipe.scheduler, num_steps, seq, device=device, sigmas=sigmas)

    def velocity(self, transformer, latents, timestep, cond: ZImageConditioning, guidance_scale):
        """The (guided) velocity, called as ``ZImagePipeline`` calls the transformer: one call
        on the batch ``[prompt; negative]`` with CFG, the prediction negated."""
        batch = latents.shape[0]
        timestep = timestep.expand(batch) if timestep.ndim == 0 else timestep
        timestep = (1000 - timestep) / 1000
        # contiguous: a strided slice of the recorded latents rounds differently in bf16
        model_input = latents.contiguous().to(self.pipe.transformer.dtype)
        embeds = cond.prompt_embeds
        cfg = cond.negative_prompt_embeds is not None
        if cfg:
            model_input = model_input.repeat(2, 1, 1, 1)
            embeds = embeds + cond.negative_prompt_embeds
            timestep = timestep.repeat(2)
        out = transformer(
            list(model_input.unsqueeze(2).unbind(dim=0)),
            timestep,
            embeds,
            joint_attention_kwargs=None,
            return_dict=False,
        )[0]
        v = torch.stack([o.float() for o in out[:batch]])
        if cfg:
            negative = torch.stack([o.float() for o in out[batch:]])
            v = v + guidance_scale * (v - negative)
        return -v.squeeze(2)

    @staticmethod
    def text_shapes(config, max_sequence_length: int) -> list[tuple[int, ...]]:
        """The Qwen3 tokens (the transformer's ``cap_feat_dim`` wide)."""
        return [(max_sequence_length, config["cap_feat_dim"])]

    @staticmethod
    def meta_inputs(config, batch, image_tokens, text_tokens, reference_tokens, dtype):
        """``ZImageTransformer2DModel``'s arguments as :meth:`velocity` passes them: one
        ``(C, 1, h, w)`` latent and one ``(L, D)`` prompt per sample."""
        meta = {"device": "meta", "dtype": dtype}
        side = int(image_tokens**0.5) * config["all_patch_size"][0]
        return {
            "x": [torch.empty(config["in_channels"], 1, side, side, **meta) for _ in range(batch)],
            "t": torch.empty(batch, **meta),
            "cap_feats": [torch.empty(text_tokens, config["cap_feat_dim"], **meta)] * batch,
        }

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Latents -> images ``(B, 3, H, W)`` in [0, 1], as ``ZImagePipeline`` decodes."""
        return decode_scaled_latents(self.pipe, latents.to(self.pipe.vae.dtype))


register_pipeline(PipelineSpec(
    "z_image", ZImageGRPOSampler, "ZImagePipeline", true_cfg=True, cfg_threshold=0.0,
    config_kwargs=("max_sequence_length", "negative_prompt"),
    lora_target_modules=Z_IMAGE_LORA_TARGETS, scheduler_config=Z_IMAGE_TURBO_SCHEDULER_CONFIG,
    architectures={"Tongyi-MAI/Z-Image-Turbo": Z_IMAGE_TURBO_ARCHITECTURE},
    tiny_builder="paco_grpo.testing.z_image:build_tiny_z_image",
))  # fmt: skip
