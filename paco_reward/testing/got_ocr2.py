"""A tiny, randomly initialised GOT-OCR 2.0 built offline, for the ``ocr`` reward's tests,
the tiny OCR recipe and the demo.

GOT-OCR 2.0 (``stepfun-ai/GOT-OCR-2.0-hf``) is a SAM-style ViT encoder, two strided
convolutions that compress its patch grid 4 x 4 into image tokens, and a Qwen2 decoder. The
tiny one has that architecture at toy width: a 128 px input cut into 16 px patches (an 8 x 8
grid, 4 image tokens), a two-layer decoder, and the byte-level tiny Qwen tokenizer with
GOT's image markers (``<img>``, ``<imgpad>``, ``</img>``) added. It is saved as an ordinary
Hugging Face folder (config, safetensors, tokenizer, image processor) and loads through the
same ``from_pretrained`` path as the real checkpoint::

    >>> from paco_reward.testing.got_ocr2 import build_tiny_got_ocr2
    >>> path = build_tiny_got_ocr2("/tmp/tiny-ocr")                    # doctest: +SKIP
    >>> OCRReward(path, dtype="float32")                                # doctest: +SKIP

Its weights are random, so it reads garbage; but their scale is raised above the real
initialisers' (whose vision tower starts at 1e-10, i.e. blind), so that what it reads depends
on the image and is not one token repeated: a test can then tell whether each image's reading
was paired with its own prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["GOT_OCR2_IMAGE_MARKERS", "build_tiny_got_ocr2"]

# GOT-OCR 2.0's image markers: the processor wraps a picture's tokens in <img> ... </img>.
GOT_OCR2_IMAGE_MARKERS = ["<img>", "</img>", "<imgpad>"]


def build_tiny_got_ocr2(
    output_dir: str | Path, seed: int = 0, image_size: int = 128, **overrides: Any
) -> Path:
    """Write a tiny ``GotOcr2ForConditionalGeneration`` + ``GotOcr2Processor`` folder.

    Args:
        output_dir: folder to create.
        seed: seed of the random weights; the same seed gives the same model.
        image_size: side of the (square) input the image processor resizes to, a multiple of
            the 16 px patch; ``(image_size / 64)^2`` image tokens per picture.
        **overrides: ``text_config={...}``, ``vision_config={...}`` or top-level
            ``GotOcr2Config`` fields.

    Returns:
        The folder, loadable with ``AutoModelForImageTextToText.from_pretrained`` and
        ``AutoProcessor.from_pretrained``.

    Example:
        >>> path = build_tiny_got_ocr2("/tmp/tiny-ocr", seed=0)   # doctest: +SKIP
    """
    import torch
    from transformers import (
        GenerationConfig,
        GotOcr2Config,
        GotOcr2ForConditionalGeneration,
        GotOcr2ImageProcessor,
        GotOcr2Processor,
    )

    from paco_reward.testing.qwen import build_tiny_tokenizer

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": GOT_OCR2_IMAGE_MARKERS})
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    text = {
        "model_type": "qwen2",
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
        "initializer_range": 0.2,
        "bos_token_id": pad,
        "eos_token_id": end_of_turn,
        "pad_token_id": pad,
    }
    vision = {
        "hidden_size": 32,
        "output_channels": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "mlp_dim": 64,
        "image_size": image_size,
        "patch_size": 16,
        "window_size": 2,
        "global_attn_indexes": [1],
        "initializer_range": 0.5,
    }
    text.update(overrides.pop("text_config", {}))
    vision.update(overrides.pop("vision_config", {}))
    config = GotOcr2Config(
        text_config=text,
        vision_config=vision,
        image_token_index=tokenizer.convert_tokens_to_ids("<imgpad>"),
        **overrides,
    )

    torch.manual_seed(seed)
    model = GotOcr2ForConditionalGeneration(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=end_of_turn, pad_token_id=pad, do_sample=False
    )
    model.save_pretrained(output_dir)
    image_processor = GotOcr2ImageProcessor(size={"height": image_size, "width": image_size})
    GotOcr2Processor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(
        output_dir
    )
    return output_dir
