"""Tiny, randomly initialised GLM-4V judges built offline: a family whose vision tower the
Qwen-VL scorer does not know.

GLM-4.1V / GLM-4.5V (``Glm4vForConditionalGeneration``) resize images as Qwen-VL does (a pixel
budget, 14 px patches, 2 x 2 merge, an image placeholder expanded per merged patch), but their
vision tower (``Glm4vVisionModel``: learned position embeddings interpolated per image, a
downsampling convolution before the merger) takes other inputs than the Qwen-VL towers, so
they score through :class:`~paco_reward.processor_backend.ProcessorBackend`. The judge registry
(:mod:`paco_reward.judges`) decides that from the config, before any weight loads.

:func:`build_tiny_glm4v` writes an ordinary Hugging Face folder of that class, loaded through
the same ``from_pretrained`` path a user takes with a GLM-4V checkpoint::

    >>> from paco_reward.testing.glm4v import build_tiny_glm4v
    >>> from paco_reward import PacoReward
    >>> path = build_tiny_glm4v("/tmp/tiny-glm4v")   # doctest: +SKIP
    >>> rm = PacoReward.from_pretrained(path)        # doctest: +SKIP

The tokenizer is the tiny Qwen byte-level BPE (:func:`~paco_reward.testing.qwen.build_tiny_tokenizer`:
single-token "Yes"/"No" and their variants) with GLM's special tokens added and a chat
template in GLM-4.1V's shape (``[gMASK]<sop>``, ``<|user|>`` turns, each image as
``<|begin_of_image|><|image|><|end_of_image|>``, ``<|assistant|>`` as the generation prompt).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# GLM-4.1V's special tokens the processor and the model's config name.
GLM_SPECIAL_TOKENS = [
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|video|>",
]

# GLM-4.1V's turn structure, without its thinking and tool parts.
GLM4V_CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tiny_glm4v(output_dir: str | Path, seed: int = 0, **overrides: Any) -> Path:
    """Write a randomly initialised tiny GLM-4V judge to ``output_dir``: a 2-layer text model
    of 64 (2 heads of 32, half of each rotated, M-RoPE sections 2/3/3), a 2-block vision
    tower of 32 (14 px patches, 2 x 2 merge, position embeddings of a 56 px grid), images of
    28 x 28 to 112 x 112 pixels, weights spread by ``initializer_range`` 0.3.

    Args:
        output_dir: folder to create (an ordinary Hugging Face model folder).
        seed: seed for the random weights; the same seed gives the same model.
        **overrides: ``text_config={...}``, ``vision_config={...}`` or top-level
            ``Glm4vConfig`` fields.

    Returns:
        The folder, loadable with ``PacoReward.from_pretrained`` and with
        ``AutoModelForImageTextToText.from_pretrained`` / ``AutoProcessor.from_pretrained``.

    Example:
        >>> path = build_tiny_glm4v("/tmp/tiny-glm4v", seed=0)   # doctest: +SKIP
    """
    import torch
    from transformers import (
        Glm4vConfig,
        Glm4vForConditionalGeneration,
        Glm4vImageProcessor,
        Glm4vProcessor,
    )
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor

    from paco_reward.testing.qwen import build_tiny_tokenizer

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": GLM_SPECIAL_TOKENS})
    tokenizer.chat_template = GLM4V_CHAT_TEMPLATE
    token = tokenizer.convert_tokens_to_ids
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 4096,
        "initializer_range": 0.3,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 3, 3],
        },
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "num_heads": 2,
        "intermediate_size": 64,
        "out_hidden_size": 64,
        "image_size": 56,
        "patch_size": 14,
        "initializer_range": 0.3,
    }
    text.update(overrides.pop("text_config", {}))
    vision.update(overrides.pop("vision_config", {}))
    top = {
        "image_token_id": token("<|image|>"),
        "video_token_id": token("<|video|>"),
        "image_start_token_id": token("<|begin_of_image|>"),
        "image_end_token_id": token("<|end_of_image|>"),
        "video_start_token_id": token("<|begin_of_video|>"),
        "video_end_token_id": token("<|end_of_video|>"),
        "initializer_range": 0.3,
        **overrides,
    }
    config = Glm4vConfig(text_config=text, vision_config=vision, **top)
    torch.manual_seed(seed)
    model = Glm4vForConditionalGeneration(config).to(torch.float32)
    model.save_pretrained(output_dir)

    sizes = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}
    processor = Glm4vProcessor(
        image_processor=Glm4vImageProcessor(
            size={"shortest_edge": 28 * 28, "longest_edge": 112 * 112}, **sizes
        ),
        tokenizer=tokenizer,
        video_processor=Glm4vVideoProcessor(**sizes),
        chat_template=GLM4V_CHAT_TEMPLATE,
    )
    processor.save_pretrained(output_dir)
    return output_dir
