"""Tiny, randomly initialised FLUX.2 pipelines built offline: FLUX.2-dev and FLUX.2-klein.

:func:`build_tiny_flux2` writes an ordinary diffusers folder that loads with
``Flux2Pipeline.from_pretrained`` as ``black-forest-labs/FLUX.2-dev`` does (a
``Mistral3ForConditionalGeneration`` text encoder with a tiny Pixtral vision tower and a
``PixtralProcessor``); :func:`build_tiny_flux2_klein` one that loads with
``Flux2KleinPipeline.from_pretrained`` as ``black-forest-labs/FLUX.2-klein-base-4B`` does (a
``Qwen3ForCausalLM`` text encoder, ``is_distilled: false``, so true CFG runs)::

    >>> from diffusers import Flux2KleinPipeline
    >>> path = build_tiny_flux2_klein("/tmp/tiny-klein")     # doctest: +SKIP
    >>> pipe = Flux2KleinPipeline.from_pretrained(path)      # doctest: +SKIP

What is real: the VAE downsamples 8x and its latents are patchified 2x2 (so a 512x512 image
is 1024 tokens, FLUX.2's schedule shift sees real token counts) and normalised by the VAE's
batch-norm statistics (set away from 0/1 here, so decoding checks them); the text encoders
have as many layers as the pipelines' default ``text_encoder_out_layers`` read ((10, 20, 30)
for FLUX.2-dev, (9, 18, 27) for klein), and the transformer's ``joint_attention_dim`` is three
times the text width, as the stacked layers need. What is tiny: widths (16 to 48), one
double- and one single-stream block, and the tokenizer (a byte-level BPE trained on the fly,
:func:`paco_reward.testing.qwen.build_tiny_tokenizer`, with FLUX.2-dev's system prompt in its
corpus so that prompt is a few tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paco_grpo.pipelines.flux2 import FLUX2_SCHEDULER_CONFIG
from paco_grpo.testing.cases import PROMPTS, ParityCase, TinyCase

__all__ = [
    "TEST_CASES",
    "TINY_TEXT_WIDTH",
    "build_tiny_flux2",
    "build_tiny_flux2_klein",
    "tiny_flux2_components",
    "tiny_qwen3_text_encoder",
]


TINY_TEXT_WIDTH = 16

# Qwen3's chat template, reduced to what Flux2KleinPipeline renders (a user turn, the
# generation prompt, and the empty thinking block of enable_thinking=False).
QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}{% endif %}"
)

# Mistral-Small-3's chat template, reduced to what Flux2Pipeline renders (a system turn and a
# user turn of text or image parts).
MISTRAL3_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}[SYSTEM_PROMPT]"
    "{% for part in message['content'] %}{{ part['text'] }}{% endfor %}[/SYSTEM_PROMPT]"
    "{% else %}[INST]{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}[IMG]{% endif %}"
    "{% endfor %}[/INST]{% endif %}{% endfor %}"
)
_MISTRAL3_TOKENS = ["[IMG]", "[IMG_BREAK]", "[IMG_END]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                    "[INST]", "[/INST]"]  # fmt: skip


TEST_CASES = {
    "flux2": TinyCase(
        "recipes/grpo_flux2_tiny_cpu.yaml",
        ParityCase(PROMPTS, (64, 96), 3.5, {"guidance_scale": 3.5, "max_sequence_length": 48},
                   {"max_sequence_length": 48}),
    ),
    "flux2_klein": TinyCase(  # a base klein: true CFG against the empty prompt
        "recipes/grpo_flux2_klein_tiny_cpu.yaml",
        ParityCase(PROMPTS, (64, 96), 4.0, {"guidance_scale": 4.0, "max_sequence_length": 48},
                   {"max_sequence_length": 48}),
    ),
}  # fmt: skip
"""How the shared tests run the tiny FLUX.2 models (:class:`~paco_grpo.testing.cases.TinyCase`)."""


def tiny_qwen3_text_encoder(tokenizer, num_hidden_layers: int = 27):
    """A tiny ``Qwen3ForCausalLM`` for ``tokenizer`` (16 wide; 27 layers: Flux2KleinPipeline
    reads layers (9, 18, 27); Z-Image's pipeline reads the second-to-last)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(
        Qwen3Config(
            vocab_size=len(tokenizer),
            hidden_size=TINY_TEXT_WIDTH,
            intermediate_size=24,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
            max_position_embeddings=1024,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    )


def _mistral3_text_encoder(tokenizer):
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    config = Mistral3Config(
        text_config={
            "model_type": "mistral",
            "vocab_size": len(tokenizer),
            "hidden_size": TINY_TEXT_WIDTH,
            "intermediate_size": 24,
            "num_hidden_layers": 30,  # Flux2Pipeline reads layers (10, 20, 30)
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 8,
            "max_position_embeddings": 1024,
            "rope_theta": 1e9,
            "sliding_window": None,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 24,
            "image_size": 32,
            "patch_size": 8,
            "num_channels": 3,
        },
        image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"),
        spatial_merge_size=2,
    )
    return Mistral3ForConditionalGeneration(config)


def _pixtral_processor(tokenizer):
    from transformers import PixtralImageProcessor, PixtralProcessor

    tokenizer.add_tokens(_MISTRAL3_TOKENS, special_tokens=True)
    image_processor = PixtralImageProcessor(size={"longest_edge": 32}, patch_size=8)
    return PixtralProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=8,
        spatial_merge_size=2,
        chat_template=MISTRAL3_CHAT_TEMPLATE,
    )


def tiny_flux2_components(seed: int = 0, klein: bool = True, **transformer_overrides: Any) -> dict:
    """The components of a tiny FLUX.2 pipeline (``Flux2KleinPipeline`` keyword arguments when
    ``klein``, else ``Flux2Pipeline``'s). ``transformer_overrides`` update the
    ``Flux2Transformer2DModel`` config."""
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2Transformer2DModel,
    )
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    from paco_reward.testing.qwen import build_tiny_tokenizer

    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer(extra_corpus=() if klein else (SYSTEM_MESSAGE,))
    if klein:
        tokenizer.chat_template = QWEN3_CHAT_TEMPLATE
        text = {"tokenizer": tokenizer, "text_encoder": tiny_qwen3_text_encoder(tokenizer)}
    else:
        processor = _pixtral_processor(tokenizer)
        text = {"tokenizer": processor, "text_encoder": _mistral3_text_encoder(tokenizer)}
    latent_channels = 4
    config = {
        "patch_size": 1,
        "in_channels": 4 * latent_channels,  # 2x2-patchified latents
        "num_layers": 1,
        "num_single_layers": 1,
        "attention_head_dim": 16,
        "num_attention_heads": 2,
        "joint_attention_dim": 3 * TINY_TEXT_WIDTH,  # three text-encoder layers stacked
        "timestep_guidance_channels": 256,
        "mlp_ratio": 3.0,
        "axes_dims_rope": (4, 4, 4, 4),
        "guidance_embeds": not klein,  # FLUX.2-dev embeds guidance, klein does not
    }
    config.update(transformer_overrides)
    transformer = Flux2Transformer2DModel(**config)
    vae = AutoencoderKLFlux2(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 8, 8),
        layers_per_block=1,
        latent_channels=latent_channels,
        norm_num_groups=4,
        sample_size=64,
        use_quant_conv=False,
        use_post_quant_conv=False,
        mid_block_add_attention=False,
    )
    with torch.no_grad():  # batch-norm statistics away from 0 / 1, so decoding must use them
        vae.bn.running_mean.copy_(torch.linspace(-0.3, 0.3, vae.bn.running_mean.numel()))
        vae.bn.running_var.copy_(torch.linspace(0.5, 2.0, vae.bn.running_var.numel()))
    components = {
        "scheduler": FlowMatchEulerDiscreteScheduler(**FLUX2_SCHEDULER_CONFIG),
        "vae": vae,
        "transformer": transformer,
        **text,
    }
    if klein:
        components["is_distilled"] = False
    return components


def _build(output_dir, klein: bool, seed: int, overrides) -> Path:
    from diffusers import Flux2KleinPipeline, Flux2Pipeline

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    cls = Flux2KleinPipeline if klein else Flux2Pipeline
    cls(**tiny_flux2_components(seed, klein=klein, **overrides)).save_pretrained(output_dir)
    return output_dir


def build_tiny_flux2_klein(output_dir: str | Path, seed: int = 0, **transformer_overrides) -> Path:
    """Write a randomly initialised tiny ``Flux2KleinPipeline`` (a non-distilled "base" klein)
    to ``output_dir``; returns the folder. ``transformer_overrides``: ``Flux2Transformer2DModel``
    config fields. The same seed gives the same model.

    Example:
        >>> path = build_tiny_flux2_klein("/tmp/tiny-klein", seed=0)   # doctest: +SKIP
    """
    return _build(output_dir, True, seed, transformer_overrides)


def build_tiny_flux2(output_dir: str | Path, seed: int = 0, **transformer_overrides) -> Path:
    """Write a randomly initialised tiny ``Flux2Pipeline`` (FLUX.2-dev's shape) to
    ``output_dir``; returns the folder. See :func:`build_tiny_flux2_klein`.

    Example:
        >>> path = build_tiny_flux2("/tmp/tiny-flux2", seed=0)   # doctest: +SKIP
    """
    return _build(output_dir, False, seed, transformer_overrides)
