"""Tiny, randomly initialised Stable Diffusion 3.5-shaped pipelines built offline.

:func:`build_tiny_sd3` writes an ordinary diffusers folder (``model_index.json``, an
``SD3Transformer2DModel``, a 16-channel ``AutoencoderKL``, two CLIP text encoders with
projection (CLIP-L and CLIP-G's places), a T5 encoder, their tokenizers and SD3.5's
scheduler config) that loads with ``StableDiffusion3Pipeline.from_pretrained`` exactly as
``stabilityai/stable-diffusion-3.5-large`` does::

    >>> from diffusers import StableDiffusion3Pipeline
    >>> path = build_tiny_sd3("/tmp/tiny-sd3")                     # doctest: +SKIP
    >>> pipe = StableDiffusion3Pipeline.from_pretrained(path)      # doctest: +SKIP

What matters for shapes is real: the VAE downsamples 8x into 16 latent channels with SD3.5's
scaling and shift factors, the transformer patchifies 2x2 and has RMS q/k norms (SD3.5
Large's), the CLIP hidden states (two towers side by side) are narrower than T5's and get
zero-padded to it, the pooled projection is the two CLIP projections concatenated, and the
schedule is SD3.5's static shift of 3.0. Widths and depths are tiny; the tokenizers are
:func:`paco_grpo.testing.flux.build_tiny_tokenizers`' character-level ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paco_grpo.pipelines.sd3 import SD35_SCHEDULER_CONFIG
from paco_grpo.testing.cases import PROMPTS, ParityCase, TinyCase

__all__ = ["TEST_CASES", "build_tiny_sd3", "tiny_sd3_components"]


# one prompt: SD3's CLIP projections round differently in a batch of other prompts
TEST_CASES = {
    "sd3": TinyCase(
        "recipes/grpo_sd35_tiny_cpu.yaml",
        ParityCase(PROMPTS[:1], (64, 96), 4.5, {"guidance_scale": 4.5, "max_sequence_length": 32},
                   {"max_sequence_length": 32}, copies=3),
    ),
}  # fmt: skip
"""How the shared tests run the tiny SD3 (:class:`~paco_grpo.testing.cases.TinyCase`)."""


def tiny_sd3_components(seed: int = 0, **transformer_overrides: Any) -> dict:
    """The components of a tiny SD3 pipeline (``StableDiffusion3Pipeline``'s keyword
    arguments). ``transformer_overrides`` update the ``SD3Transformer2DModel`` config; the
    text encoders follow its ``joint_attention_dim`` (T5 width) and ``pooled_projection_dim``
    (two CLIP projections of half of it each)."""
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel
    from transformers import (
        CLIPTextConfig,
        CLIPTextModelWithProjection,
        T5Config,
        T5EncoderModel,
    )

    from paco_grpo.testing.flux import build_tiny_tokenizers

    tokenizer, tokenizer_3 = build_tiny_tokenizers()
    config = {
        "sample_size": 8,
        "patch_size": 2,
        "in_channels": 16,
        "out_channels": 16,
        "num_layers": 2,
        "attention_head_dim": 8,
        "num_attention_heads": 4,
        "caption_projection_dim": 32,
        "joint_attention_dim": 48,
        "pooled_projection_dim": 32,
        "pos_embed_max_size": 16,
        "qk_norm": "rms_norm",
    }
    config.update(transformer_overrides)
    torch.manual_seed(seed)

    def clip(width: int):
        return CLIPTextModelWithProjection(
            CLIPTextConfig(
                vocab_size=len(tokenizer),
                hidden_size=width,
                intermediate_size=37,
                num_hidden_layers=2,
                num_attention_heads=4,
                max_position_embeddings=77,
                projection_dim=width,
                hidden_act="gelu",
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        )

    half = config["pooled_projection_dim"] // 2
    text_encoder, text_encoder_2 = clip(half), clip(config["pooled_projection_dim"] - half)
    text_encoder_3 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_3),
            d_model=config["joint_attention_dim"],
            d_kv=8,
            d_ff=37,
            num_layers=1,
            num_heads=4,
            relative_attention_num_buckets=8,
            pad_token_id=tokenizer_3.pad_token_id,
            eos_token_id=tokenizer_3.eos_token_id,
            decoder_start_token_id=tokenizer_3.pad_token_id,
        )
    )
    transformer = SD3Transformer2DModel(**config)
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=config["in_channels"],
        norm_num_groups=4,
        sample_size=64,
        scaling_factor=1.5305,  # SD3.5's vae/config.json
        shift_factor=0.0609,
        use_quant_conv=False,
        use_post_quant_conv=False,
        mid_block_add_attention=False,
    )
    return {
        "scheduler": FlowMatchEulerDiscreteScheduler(**SD35_SCHEDULER_CONFIG),
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "text_encoder_2": text_encoder_2,
        "tokenizer_2": tokenizer,
        "text_encoder_3": text_encoder_3,
        "tokenizer_3": tokenizer_3,
        "transformer": transformer,
    }


def build_tiny_sd3(output_dir: str | Path, seed: int = 0, **transformer_overrides: Any) -> Path:
    """Write a randomly initialised tiny ``StableDiffusion3Pipeline`` to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary diffusers pipeline folder).
        seed: seed of the random weights; the same seed gives the same model.
        **transformer_overrides: ``SD3Transformer2DModel`` config fields (e.g. ``num_layers=1``).

    Returns:
        The folder, loadable with ``StableDiffusion3Pipeline.from_pretrained``.

    Example:
        >>> path = build_tiny_sd3("/tmp/tiny-sd3", seed=0)   # doctest: +SKIP
    """
    from diffusers import StableDiffusion3Pipeline

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    pipe = StableDiffusion3Pipeline(**tiny_sd3_components(seed, **transformer_overrides))
    pipe.save_pretrained(output_dir)
    return output_dir
