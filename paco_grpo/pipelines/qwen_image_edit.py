"""Qwen-Image-Edit editing: Flow-GRPO sampling on diffusers' ``QwenImageEditPipeline``.

The reference's packed latents are appended to the image tokens (see
:mod:`paco_grpo.pipelines.editing`); the transformer is Qwen-Image's, called with true
classifier-free guidance.

    >>> from diffusers import QwenImageEditPipeline
    >>> pipe = QwenImageEditPipeline.from_pretrained("Qwen/Qwen-Image-Edit")  # doctest: +SKIP
    >>> sampler = QwenImageEditGRPOSampler(pipe, negative_prompt=" ")        # doctest: +SKIP
    >>> out = sampler(["make the sky pink"] * 4, [photo] * 4, area=512 * 512, num_steps=10,
    ...               guidance_scale=4.0, noise_level=1.0, noise_steps=[1])  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib

import torch

from paco_grpo.pipelines.editing import EditConditioning, EditGRPOSampler
from paco_grpo.pipelines.registry import PipelineSpec, register_pipeline
from paco_reward.images import image_hash

__all__ = ["QwenImageEditGRPOSampler"]


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


register_pipeline(
    PipelineSpec(
        "qwen_image_edit",
        QwenImageEditGRPOSampler,
        "QwenImageEditPipeline",
        edits=True,
        true_cfg=True,
        config_kwargs=("max_sequence_length", "negative_prompt"),
    )
)
