"""A tiny, randomly initialised CLIP built offline, for the CLIP-I baseline in tests and the demo.

:func:`build_tiny_clip` writes an ordinary Hugging Face folder (config, safetensors
weights, a byte-level BPE tokenizer learned on the fly, image processor) that
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


END_OF_WORD = "</w>"


def learn_bpe(word_counts: dict[str, int], num_merges: int) -> list[tuple[str, str]]:
    """CLIP-style byte-pair merges of ``word_counts`` (pre-tokenized words): a word's last
    symbol carries :data:`END_OF_WORD`; each merge joins the most frequent adjacent pair, a
    tie going to the smallest pair. Every process learns the same merges from the same
    counts; tokenizers' ``BpeTrainer`` does not with an end-of-word suffix (it numbers the
    suffixed symbols in hash-map order and breaks ties by those numbers:
    huggingface/tokenizers#1794), which made two trainings of one CLIP differ."""
    from collections import Counter

    words = {tuple(w[:-1]) + (w[-1] + END_OF_WORD,): n for w, n in sorted(word_counts.items())}
    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: Counter = Counter()
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        words = {_merge(symbols, best): count for symbols, count in words.items()}
    return merges


def _merge(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    merged: list[str] = []
    i = 0
    while i < len(symbols):
        if symbols[i : i + 2] == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def build_tiny_clip_tokenizer(vocab_size: int = 768, corpus: Sequence[str] = ()):
    """A CLIP-style byte-level BPE (lower-casing, ``</w>`` word suffix) learned from a small
    corpus (a built-in word list, or ``corpus``: texts of the domain the model will read) by
    :func:`learn_bpe`, wrapped in :class:`transformers.CLIPTokenizer`. The same corpus gives
    the same tokenizer in every process."""
    from collections import Counter

    from tokenizers import Regex, normalizers, pre_tokenizers
    from transformers import CLIPTokenizer

    normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()]
    )
    pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                behavior="removed",
                invert=True,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    texts = list(corpus) or [" ".join(_CLIP_CORPUS)]
    word_counts = Counter(
        word
        for text in texts
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    )
    specials = ["<|startoftext|>", "<|endoftext|>"]
    # Every byte, alone and ending a word, as in CLIP: any text encodes without unknowns.
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    symbols = alphabet + [symbol + END_OF_WORD for symbol in alphabet]
    merges = learn_bpe(word_counts, vocab_size - len(specials) - len(symbols))
    tokens = specials + symbols + [a + b for a, b in merges]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(tokens))}
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=77)


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
    overrides.setdefault("projection_dim", 16)
    config = CLIPConfig(text_config=text, vision_config=vision, **overrides)
    torch.manual_seed(seed)
    model = CLIPModel(config).to(torch.float32).eval()
    model.save_pretrained(output_dir)
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(output_dir)
    # Published CLIP folders keep the image processor in preprocessor_config.json too, where
    # transformers 4 (the reference code some tests run) reads it.
    processor = json.loads((output_dir / "processor_config.json").read_text())["image_processor"]
    (output_dir / "preprocessor_config.json").write_text(json.dumps(processor, indent=2) + "\n")
    return output_dir
