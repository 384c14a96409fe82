"""A tiny, randomly initialised FLUX text-to-image pipeline built offline.

For tests and the demo of stage 2 (grid generation): every component is built from
an explicit config (1 double + 1 single transformer block, a 2-level VAE, 1-layer
CLIP and T5 encoders) and the tokenizers are word-level tokenizers trained on the
fly, so nothing is downloaded. The folder loads with ``FluxPipeline.from_pretrained``
exactly like ``black-forest-labs/FLUX.1-dev``; its images are noise.

    >>> path = build_tiny_flux("/tmp/tiny-flux")                        # doctest: +SKIP
    >>> from diffusers import FluxPipeline                              # doctest: +SKIP
    >>> pipe = FluxPipeline.from_pretrained(path)                       # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

_WORDS = (
    "a an the of and with in on grid layout images panel four two three six top bottom left "
    "right middle same character style red green blue yellow woman man cat dog fox"
).split()


def build_word_tokenizer(max_length: int):
    """A word-level ``PreTrainedTokenizerFast`` (pad 0, unk 1, eos 2) for the tiny encoders."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2}
    for word in _WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="</s>",
        model_max_length=max_length,
    )


def build_tiny_flux(output_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny random ``FluxPipeline`` folder to ``output_dir`` and return it.

    The VAE downsamples by 2 and the transformer packs 2x2 latents, so heights and
    widths must be multiples of 4. Generation of a 128x128 grid with 2 steps takes well
    under a second on a CPU.
    """
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        FluxPipeline,
        FluxTransformer2DModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    output_dir = Path(output_dir)
    torch.manual_seed(seed)
    tokenizer = build_word_tokenizer(77)
    tokenizer_2 = build_word_tokenizer(64)
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=1,
            projection_dim=32,
            bos_token_id=0,
            eos_token_id=2,
            pad_token_id=0,
            max_position_embeddings=77,
        )
    )
    text_encoder_2 = T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer_2), d_model=32, d_kv=8, d_ff=37, num_layers=1, num_heads=4
        )
    )
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=32,
        axes_dims_rope=[4, 4, 8],
    )
    vae = AutoencoderKL(
        sample_size=32,
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 8),
        layers_per_block=1,
        latent_channels=1,
        norm_num_groups=4,
        use_quant_conv=False,
        use_post_quant_conv=False,
        shift_factor=0.0609,
        scaling_factor=1.5035,
    )
    pipe = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        text_encoder_2=text_encoder_2,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )
    pipe.save_pretrained(output_dir)
    logger.info("tiny FLUX pipeline written to %s", output_dir)
    return output_dir
