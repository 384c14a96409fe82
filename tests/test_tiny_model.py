"""The offline tiny Qwen2.5-VL and Qwen3-VL factories: ordinary HF folders, each family's chat
format and image processing, Yes/No tokens."""

from __future__ import annotations

import json

import torch
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    Qwen2_5_VLForConditionalGeneration,
)

from paco_reward.testing import build_tiny_qwen2_5_vl
from paco_reward.testing.qwen import YES_NO_WORDS


def test_folder_loads_with_plain_transformers(tiny_model_dir):
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= names
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(tiny_model_dir)
    assert 100_000 < sum(p.numel() for p in model.parameters()) < 5_000_000
    assert json.loads((tiny_model_dir / "config.json").read_text())["model_type"] == "qwen2_5_vl"
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    assert type(processor).__name__ == "Qwen2_5_VLProcessor"


def test_chat_template_renders_like_qwen2_5_vl(tiny_model_dir):
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen3_vl_folder_loads_with_plain_transformers(tiny_qwen3_vl_dir):
    config = json.loads((tiny_qwen3_vl_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl"
    assert config["vision_config"]["deepstack_visual_indexes"] == [0, 1]
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3_vl_dir)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert 100_000 < sum(p.numel() for p in model.parameters()) < 5_000_000
    processor = AutoProcessor.from_pretrained(tiny_qwen3_vl_dir)
    assert type(processor).__name__ == "Qwen3VLProcessor"
    image_processor = processor.image_processor
    assert (image_processor.patch_size, image_processor.merge_size) == (16, 2)
    assert list(image_processor.image_mean) == [0.5, 0.5, 0.5]


def test_chat_template_renders_like_qwen3_vl(tiny_qwen3_vl_dir):
    """Qwen3-VL-Instruct's template: no default system turn."""
    processor = AutoProcessor.from_pretrained(tiny_qwen3_vl_dir)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_yes_no_variants_are_single_tokens(family_dir):
    tokenizer = AutoTokenizer.from_pretrained(family_dir)
    for word in YES_NO_WORDS + [" " + w for w in YES_NO_WORDS]:
        ids = tokenizer.encode(word, add_special_tokens=False)
        assert len(ids) == 1, word
        assert tokenizer.decode(ids) == word
    # Punctuation after the decision word stays a separate token, as in Qwen's vocabulary.
    assert (
        tokenizer.encode("Yes.", add_special_tokens=False)[0]
        == tokenizer.encode("Yes", add_special_tokens=False)[0]
    )


def test_same_seed_same_weights(tmp_path):
    a = build_tiny_qwen2_5_vl(tmp_path / "a", seed=3)
    b = build_tiny_qwen2_5_vl(tmp_path / "b", seed=3)
    c = build_tiny_qwen2_5_vl(tmp_path / "c", seed=4)
    wa, wb, wc = (
        Qwen2_5_VLForConditionalGeneration.from_pretrained(p).lm_head.weight for p in (a, b, c)
    )
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
