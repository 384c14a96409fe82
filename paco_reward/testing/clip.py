"""A tiny, randomly initialised CLIP built offline, for the CLIP-I baseline in tests and the demo.

:func:`build_tiny_clip` writes an ordinary Hugging Face folder (config, safetensors
weights, a byte-level BPE tokenizer trained on the fly, image processor) that
loads with ``CLIPModel.from_pretrained`` / ``CLIPProcessor.from_pretrained`` and
therefore with :class:`paco_reward.baselines.CLIPImageScorer`, exactly as a real
checkpoint such as ``openai/clip-vit-base-patch32`` would::

    >>> from paco_reward.testing.clip import build_tiny_clip
    >>> from paco_reward.baselines import CLIPImageScorer
    >>> path = build_tiny_clip("/tmp/tiny-clip")          # doctest: +SKIP
    >>> scorer = CLIPImageScorer(path)                    # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_CLIP_CORPUS = (
    "a photo of the red green blue yellow purple orange black white gray circle square "
    "triangle star shape panel image picture same different style identity logic scene "
    "character background foreground large small left right top bottom"
).split()


def build_tiny_clip_tokenizer(vocab_size: int = 512, corpus: Sequence[str] = ()):
    """Train a CLIP-style byte-level BPE (lower-casing, ``</w>`` word suffix) on a small
    corpus (a built-in word list, or ``corpus``: texts of the domain the model will read)
    and wrap it in :class:`transformers.CLIPTokenizer`."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import CLIPTokenizer

    specials = ["<|startoftext|>", "<|endoftext|>"]
    bpe = Tokenizer(models.BPE(end_of_word_suffix="</w>", continuing_subword_prefix=""))
    bpe.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                behavior="removed",
                invert=True,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        end_of_word_suffix="</w>",
        show_progress=False,
    )
    bpe.train_from_iterator(list(corpus) or [" ".join(_CLIP_CORPUS)] * 20, trainer=trainer)
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    return CLIPTokenizer(vocab=state["vocab"], merges=merges, model_max_length=77)


def build_tiny_clip(
    output_dir: str | Path,
    seed: int = 0,
    image_size: int = 32,
    corpus: Sequence[str] = (),
    **overrides: Any,
) -> Path:
    """Write a randomly initialised tiny CLIP (``CLIPModel`` + ``CLIPProcessor``) to ``output_dir``.

    Args:
        output_dir: folder to create (an ordinary Hugging Face model folder).
        seed: seed for the random weights; the same seed gives the same model.
        image_size: input resolution of the vision tower (patch size 8).
        corpus: texts the tokenizer's BPE is trained on (default a built-in word list).
        **overrides: ``text_config={...}``, ``vision_config={...}`` or top-level
            ``CLIPConfig`` fields.

    Returns:
        The folder, loadable with ``CLIPModel.from_pretrained`` and
        ``CLIPProcessor.from_pretrained``.

    Example:
        >>> path = build_tiny_clip("/tmp/tiny-clip", seed=0)   # doctest: +SKIP
    """
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_clip_tokenizer(corpus=corpus)
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 77,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "image_size": image_size,
        "patch_size": 8,
    }
    text.update(overrides.pop("text_config", {}))
    vision.update(overrides.pop("vision_config", {}))
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16, **overrides)
    torch.manual_seed(seed)
    model = CLIPModel(config).to(torch.float32).eval()
    model.save_pretrained(output_dir)
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(output_dir)
    return output_dir
