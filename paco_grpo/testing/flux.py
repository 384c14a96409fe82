"""Tiny, randomly initialised FLUX pipelines built offline.

:func:`build_tiny_flux` writes an ordinary diffusers folder (``model_index.json``,
transformer, VAE, CLIP and T5 text encoders, their tokenizers, the FLUX.1-dev
scheduler config) that loads with ``FluxPipeline.from_pretrained`` exactly as
``black-forest-labs/FLUX.1-dev`` does::

    >>> from diffusers import FluxPipeline
    >>> path = build_tiny_flux("/tmp/tiny-flux")          # doctest: +SKIP
    >>> pipe = FluxPipeline.from_pretrained(path)         # doctest: +SKIP

The shapes that matter for cost and schedules are real: the VAE downsamples 8x
(four blocks), latents are packed 2x2, so a 512x512 image is 1024 tokens and a
1024x1024 image 4096 tokens, and the resolution-dependent timestep shift is the
one FLUX.1-dev uses. Widths and depths are tiny (the transformer has one double-
and one single-stream block), and the VAE has no mid-block attention so 1024²
decodes stay cheap on CPU. The tokenizers are character-level (CLIP BPE without
merges, T5 unigram over characters), constructed in code.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from paco_grpo.pipelines.flux import FLUX_DEV_SCHEDULER_CONFIG
from paco_grpo.testing.cases import PROMPTS, ParityCase, TinyCase

_CHARS = string.ascii_lowercase + string.ascii_uppercase + string.digits + string.punctuation


TEST_CASES = {
    "flux": TinyCase(
        "recipes/grpo_tiny_cpu.yaml",
        ParityCase(PROMPTS, (64, 96), 3.5, {"guidance_scale": 3.5, "max_sequence_length": 32},
                   {"max_sequence_length": 32}),
    ),
}  # fmt: skip
"""How the shared tests run the tiny FLUX.1 (:class:`~paco_grpo.testing.cases.TinyCase`)."""


def build_tiny_tokenizers(clip_max_length: int = 77, words: Sequence[str] = ()):
    """A character-level ``CLIPTokenizer`` and ``T5Tokenizer``, built without any download.

    ``words`` become whole T5 pieces (scored above their spelling, so the unigram model
    picks them): a prompt of known words is one token per word instead of one per letter."""
    from transformers import CLIPTokenizer, T5Tokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in _CHARS:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    clip = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=clip_max_length)
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -2.0)]
    pieces += [(ch, -3.0) for ch in _CHARS] + [("▁" + ch, -2.5) for ch in _CHARS]
    known = {piece for piece, _ in pieces}
    pieces += [("▁" + w, -1.0) for w in dict.fromkeys(words) if "▁" + w not in known]
    t5 = T5Tokenizer(vocab=pieces, extra_ids=0)
    return clip, t5


def tiny_flux_components(
    seed: int = 0,
    vae_channels: Sequence[int] = (8, 8, 8, 8),
    words: Sequence[str] = (),
    **transformer_overrides: Any,
) -> dict:
    """The components of a tiny FLUX pipeline (diffusers' ``FluxPipeline`` keyword arguments).

    ``transformer_overrides`` update the ``FluxTransformer2DModel`` config; the text encoders
    follow its ``joint_attention_dim`` (T5 width) and ``pooled_projection_dim`` (CLIP width), and
    the VAE its ``in_channels`` (latent channels = in_channels / 4), so a real-shape transformer
    (``in_channels=64, num_attention_heads=24, attention_head_dim=128, joint_attention_dim=4096,
    pooled_projection_dim=768, axes_dims_rope=(16, 56, 56)``) gets matching tiny companions.
    ``vae_channels`` are the VAE's block widths (one block per entry; ``n`` blocks downsample
    ``2 ** (n - 1)`` times), ``words`` whole-word T5 pieces (:func:`build_tiny_tokenizers`)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    tokenizer, tokenizer_2 = build_tiny_tokenizers(words=words)
    transformer_config = {
        "patch_size": 1,
        "in_channels": 16,
        "num_layers": 1,
        "num_single_layers": 1,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": 32,
        "pooled_projection_dim": 32,
        "guidance_embeds": True,
        "axes_dims_rope": (4, 6, 6),
    }
    transformer_config.update(transformer_overrides)
    torch.manual_seed(seed)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=transformer_config["pooled_projection_dim"],
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            max_position_embeddings=77,
            projection_dim=transformer_config["pooled_projection_dim"],
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    text_encoder_2 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_2),
            d_model=transformer_config["joint_attention_dim"],
            d_kv=8,
            d_ff=37,
            num_layers=1,
            num_heads=4,
            relative_attention_num_buckets=8,
            pad_token_id=tokenizer_2.pad_token_id,
            eos_token_id=tokenizer_2.eos_token_id,
            decoder_start_token_id=tokenizer_2.pad_token_id,
        )
    )
    transformer = FluxTransformer2DModel(**transformer_config)
    vae = tiny_flux_vae(vae_channels, transformer_config["in_channels"] // 4)
    scheduler = FlowMatchEulerDiscreteScheduler(**FLUX_DEV_SCHEDULER_CONFIG)
    return {
        "scheduler": scheduler,
        "vae": vae,
        "text_encoder": text_encoder,
        "tokenizer": tokenizer,
        "text_encoder_2": text_encoder_2,
        "tokenizer_2": tokenizer_2,
        "transformer": transformer,
    }


def tiny_flux_vae(block_channels: Sequence[int] = (8, 8, 8, 8), latent_channels: int = 4):
    """A tiny ``AutoencoderKL`` of FLUX.1's kind (its scaling and shift factors; Z-Image's VAE
    is the same): one block per entry of ``block_channels`` (``n`` blocks downsample
    ``2 ** (n - 1)`` times), no mid-block attention so large decodes stay cheap on CPU."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * len(block_channels),
        up_block_types=("UpDecoderBlock2D",) * len(block_channels),
        block_out_channels=tuple(block_channels),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=4,
        sample_size=64,
        scaling_factor=0.3611,
        shift_factor=0.1159,
        use_quant_conv=False,
        use_post_quant_conv=False,
        mid_block_add_attention=False,
    )


def build_tiny_flux(output_dir: str | Path, seed: int = 0, **transformer_overrides: Any) -> Path:
    """Write a randomly initialised tiny FLUX pipeline to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary diffusers pipeline folder).
        seed: seed of the random weights; the same seed gives the same model.
        **transformer_overrides: ``FluxTransformer2DModel`` config fields (e.g. ``num_layers=2``).

    Returns:
        The folder, loadable with ``FluxPipeline.from_pretrained``.

    Example:
        >>> path = build_tiny_flux("/tmp/tiny-flux", seed=0)   # doctest: +SKIP
    """
    from diffusers import FluxPipeline

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    pipe = FluxPipeline(**tiny_flux_components(seed, **transformer_overrides))
    pipe.save_pretrained(output_dir)
    return output_dir
