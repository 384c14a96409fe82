"""Tiny, randomly initialised Qwen2.5-VL evaluators built offline.

Tests, the demo and the benchmarks never reach a model hub. They call
:func:`build_tiny_qwen2_5_vl`, which writes an ordinary Hugging Face folder (config,
safetensors weights, tokenizer, image processor, chat template) that loads
through exactly the path a user takes with ``X-GenGroup/PaCo-Reward-7B``::

    >>> from paco_reward.testing import build_tiny_qwen2_5_vl
    >>> from paco_reward import PacoReward
    >>> path = build_tiny_qwen2_5_vl("/tmp/tiny-paco")          # doctest: +SKIP
    >>> rm = PacoReward.from_pretrained(path)              # doctest: +SKIP

The tokenizer is a byte-level BPE trained on the fly with Qwen's special tokens
and pre-tokenisation rule, so "Yes"/"No" and their case/space variants are
single tokens, as they are in the real Qwen2.5 vocabulary.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Qwen2.5-VL's special tokens, in the order the real vocabulary has them.
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Same rendering as Qwen2.5-VL-Instruct's chat template: a default system turn,
# ChatML turns, one <|vision_start|><|image_pad|><|vision_end|> per image.
QWEN2_5_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
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
    "{% endfor %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

YES_NO_WORDS = ["Yes", "No", "yes", "no", "YES", "NO"]

# Vocabulary the tiny tokenizer is trained on: our templates, consistency
# vocabulary and the words the synthetic world's reasons use. Anything else
# still tokenises (byte-level fallback), just into more pieces.
_CORPUS_WORDS = (
    "the a an and or of in on to is are be with first second image images two subfigures "
    "subfigure theme generated based given do does maintain consistency consistent terms "
    "style logic identity answer provide detailed reasons then criteria meet following "
    "please compare edited original instruction except parts intentionally changed "
    "according remain accurately follow this edit same different color colour shape "
    "palette outline texture progression character panel panels grid red green blue "
    "yellow purple orange black white gray circle square triangle star dots stripes "
    "plain large small left right top bottom because so but while both they it has have "
    "not match matches differ differs shows show picture scene background foreground"
).split()


# The templates the tiny tokenizers learn from, fixed: a template added later leaves every tiny
# model (and the numbers tests froze from them) as it was.
CORPUS_TEMPLATES = ("consistency", "criteria", "rank", "edit_consistency", "edit_following")


def tokenizer_corpus(repeats: int = 40) -> list[str]:
    """Lines the tiny tokenizers are trained on: the templates, every Yes/No variant and the
    consistency vocabulary, ``repeats`` times."""
    from paco_reward.templates import TEMPLATES

    lines: list[str] = []
    for name in CORPUS_TEMPLATES:
        lines.append(TEMPLATES[name].text.replace("{prompt}", "a red fox in a forest"))
    # Every case and leading-space variant of the decision words, often enough
    # that BPE merges each one into a single token.
    variants = [w for w in YES_NO_WORDS] + [" " + w for w in YES_NO_WORDS]
    lines += ["".join(p) for p in itertools.permutations(variants, 3)]
    lines += [" ".join(_CORPUS_WORDS)] * 4
    lines += [f"{w}. {w}, {w}!" for w in YES_NO_WORDS]
    return lines * repeats


def build_tiny_tokenizer(vocab_size: int = 1024, extra_corpus: Sequence[str] = ()):
    """Train a byte-level BPE tokenizer with Qwen's special tokens and chat template.

    ``extra_corpus``: more lines to train on (each 40 times), so that their words become few
    tokens (e.g. a generator's system prompt)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=QWEN_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(tokenizer_corpus() + list(extra_corpus) * 40, trainer=trainer)
    tokenizer = Qwen2Tokenizer(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        errors="replace",
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    tokenizer.chat_template = QWEN2_5_VL_CHAT_TEMPLATE
    return tokenizer


# vLLM's CPU attention kernels take head sizes 32, 64, 80, ... but not the tiny model's 16:
# the vLLM-compatible tiny model has 2 heads of 32 (1 key/value head) over the same width,
# with the M-RoPE sections scaled to the larger head (they sum to head_dim / 2).
VLLM_CPU_TEXT_CONFIG: dict[str, Any] = {
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 10000.0},
}


def tiny_config_dict(tokenizer, vllm_compatible: bool = False, **overrides: Any) -> dict:
    """The tiny Qwen2.5-VL configuration; ``overrides`` update the text/vision/top level.
    ``vllm_compatible`` gives the text model a head size vLLM's CPU kernels accept."""
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [2, 3, 3],
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
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
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
    if vision["out_hidden_size"] != text["hidden_size"]:
        vision["out_hidden_size"] = text["hidden_size"]
    top.update(overrides)
    return {"text_config": text, "vision_config": vision, **top}


def build_tiny_qwen2_5_vl(
    output_dir: str | Path,
    seed: int = 0,
    min_pixels: int = 28 * 28,
    max_pixels: int = 56 * 56,
    vllm_compatible: bool = False,
    **overrides: Any,
) -> Path:
    """Write a randomly initialised tiny Qwen2.5-VL evaluator to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary Hugging Face model folder).
        seed: seed for the random weights; the same seed gives the same model.
        min_pixels / max_pixels: the image processor's pixel budget. The default
            keeps every image at 1 to 4 vision tokens so tests run fast on CPU.
        vllm_compatible: attention heads of 32 (:data:`VLLM_CPU_TEXT_CONFIG`) instead of 16,
            so vLLM's CPU backend can serve the model; same width, vocabulary and images.
        **overrides: ``text_config={...}``, ``vision_config={...}`` or top-level
            Qwen2.5-VL config fields.

    Returns:
        The folder, loadable with ``PacoReward.from_pretrained`` and with
        ``Qwen2_5_VLForConditionalGeneration.from_pretrained`` /
        ``AutoProcessor.from_pretrained``.

    Example:
        >>> path = build_tiny_qwen2_5_vl("/tmp/tiny-paco", seed=0)   # doctest: +SKIP
    """
    import torch
    from transformers import (
        GenerationConfig,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    config = Qwen2_5_VLConfig(
        **tiny_config_dict(tokenizer, vllm_compatible=vllm_compatible, **overrides)
    )

    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[config.text_config.eos_token_id, config.text_config.bos_token_id],
        pad_token_id=config.text_config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(output_dir)

    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": min_pixels, "longest_edge": max_pixels},
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
    )
    video_processor = Qwen2VLVideoProcessor(patch_size=14, merge_size=2, temporal_patch_size=2)
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=QWEN2_5_VL_CHAT_TEMPLATE,
    )
    processor.save_pretrained(output_dir)
    return output_dir


# Vision towers of the from-scratch model the SFT trainer builds (``tiny_model: true``,
# ``tiny_vision: <name>``). "wide" has twice the default's width and one more block: on the
# synthetic world (4 tokens per panel) the default tower learns colour, shape and background
# but not markings, the wide one does. "base" (the default tower) learns the 1-token
# relational toy task in under 1,000 steps, where the wide one did not in the same budget.
TINY_VISION_TOWERS: dict[str, dict[str, Any]] = {
    "base": {},
    "wide": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 4,
        "depth": 3,
        "fullatt_block_indexes": [2],
    },
}


# Qwen2.5-VL-7B-Instruct's shape, for random-weight speed runs on a GPU
# (`build_tiny_qwen2_5_vl(dir, **QWEN_7B_SHAPE)`); the tokenizer stays the tiny one.
QWEN_7B_SHAPE: dict[str, Any] = {
    "text_config": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "rope_parameters": {
            "rope_type": "default",
            "mrope_section": [16, 24, 24],
            "rope_theta": 1000000.0,
        },
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "window_size": 112,
        "fullatt_block_indexes": [7, 15, 23, 31],
    },
}
