"""Tiny, randomly initialised Qwen3-VL evaluators built offline, beside the Qwen2.5-VL ones
of :mod:`paco_reward.testing.qwen`.

Same tokenizer (Qwen's special tokens, single-token "Yes"/"No"), same ordinary Hugging Face
folder, loaded through the same ``from_pretrained`` path a user takes with
``Qwen/Qwen3-VL-8B-Instruct``. What differs is Qwen3-VL's: 16-pixel patches (one vision token
per 32 x 32 pixels), DeepStack (vision features of some vision blocks added to the first
decoder layers), interleaved M-RoPE, q/k norms, and a chat template without a default system
turn::

    >>> from paco_reward.testing import build_tiny_qwen3_vl
    >>> from paco_reward import PacoReward
    >>> path = build_tiny_qwen3_vl("/tmp/tiny-paco-qwen3")   # doctest: +SKIP
    >>> rm = PacoReward.from_pretrained(path)                # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paco_reward.testing.qwen import build_tiny_tokenizer

# Qwen3-VL-Instruct's rendering of a conversation without tools: a system turn only when one
# is given, ChatML turns, one <|vision_start|><|image_pad|><|vision_end|> per image.
QWEN3_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3-VL's image processor: 16-pixel patches merged 2 x 2, mean and std 0.5.
PATCH_SIZE = 16
MERGE_SIZE = 2
IMAGE_MEAN = [0.5, 0.5, 0.5]

# vLLM's CPU attention kernels take head sizes 32, 64, 80, ... but not the tiny model's 16
# (see paco_reward.testing.qwen.VLLM_CPU_TEXT_CONFIG); the interleaved M-RoPE sections sum to
# head_dim / 2.
VLLM_CPU_TEXT_CONFIG: dict[str, Any] = {
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "rope_parameters": {
        "rope_type": "default",
        "mrope_section": [6, 5, 5],
        "mrope_interleaved": True,
        "rope_theta": 10000.0,
    },
}


def tiny_qwen3_vl_config_dict(tokenizer, vllm_compatible: bool = False, **overrides: Any) -> dict:
    """The tiny Qwen3-VL configuration; ``overrides`` update the text/vision/top level.
    ``vllm_compatible`` gives the text model a head size vLLM's CPU kernels accept."""
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [4, 2, 2],
            "mrope_interleaved": True,
            "rope_theta": 10000.0,
        },
        "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": 2,
        "num_position_embeddings": 64,
        # DeepStack: both blocks' features are added after the first two of the three decoder
        # layers. As in the real models, the last layer gets none: a feature added to the
        # image positions after the last layer reaches no later token (no gradient either).
        "deepstack_visual_indexes": [0, 1],
    }
    top = {
        "image_token_id": tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        "tie_word_embeddings": False,
    }
    if vllm_compatible:
        text.update(VLLM_CPU_TEXT_CONFIG)
    text.update(overrides.pop("text_config", {}))
    vision.update(overrides.pop("vision_config", {}))
    vision["out_hidden_size"] = text["hidden_size"]
    top.update(overrides)
    return {"text_config": text, "vision_config": vision, **top}


def build_tiny_qwen3_vl(
    output_dir: str | Path,
    seed: int = 0,
    min_pixels: int = 32 * 32,
    max_pixels: int = 64 * 64,
    vllm_compatible: bool = False,
    **overrides: Any,
) -> Path:
    """Write a randomly initialised tiny Qwen3-VL evaluator to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary Hugging Face model folder).
        seed: seed for the random weights; the same seed gives the same model.
        min_pixels / max_pixels: the image processor's pixel budget. The default keeps
            every image at 1 to 4 vision tokens (32 x 32 pixels each) so tests run fast.
        vllm_compatible: attention heads of 32 (:data:`VLLM_CPU_TEXT_CONFIG`) instead of 16.
        **overrides: ``text_config={...}``, ``vision_config={...}`` or top-level Qwen3-VL
            config fields.

    Returns:
        The folder, loadable with ``PacoReward.from_pretrained`` and with
        ``AutoModelForImageTextToText.from_pretrained`` / ``AutoProcessor.from_pretrained``.

    Example:
        >>> path = build_tiny_qwen3_vl("/tmp/tiny-paco-qwen3", seed=0)   # doctest: +SKIP
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = QWEN3_VL_CHAT_TEMPLATE
    config = Qwen3VLConfig(
        **tiny_qwen3_vl_config_dict(tokenizer, vllm_compatible=vllm_compatible, **overrides)
    )

    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[config.text_config.eos_token_id, config.text_config.bos_token_id],
        pad_token_id=config.text_config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(output_dir)

    sizes = {"patch_size": PATCH_SIZE, "merge_size": MERGE_SIZE, "temporal_patch_size": 2}
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        image_mean=IMAGE_MEAN,
        image_std=IMAGE_MEAN,
        **sizes,
    )
    video_processor = Qwen3VLVideoProcessor(image_mean=IMAGE_MEAN, image_std=IMAGE_MEAN, **sizes)
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=QWEN3_VL_CHAT_TEMPLATE,
    )
    processor.save_pretrained(output_dir)
    return output_dir
