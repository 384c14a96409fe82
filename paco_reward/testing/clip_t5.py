"""A tiny, randomly initialised CLIP-FlanT5 (VQAScore's model) built offline, for tests.

:func:`build_tiny_clip_t5` writes what the published ``zhiqiulin/clip-flant5-xxl`` is: a
folder whose ``config.json`` is a ``clip_t5`` T5 config naming its vision tower by
``mm_vision_tower`` (here a tiny CLIP folder written beside it by
:func:`~paco_reward.testing.clip.build_tiny_clip`), weights under the reference class's names,
and a T5 tokenizer (a unigram vocabulary of whole words and single characters, in T5's
layout: ``<pad>``, ``</s>``, ``<unk>``, the pieces, 100 sentinels; the config's vocabulary is
28 rows larger than the tokenizer, as FlanT5's 32,128 against its tokenizer's 32,100). It
loads with :meth:`paco_reward.vqascore.VQAScore.from_pretrained` exactly as the real model::

    >>> from paco_reward.testing.clip_t5 import build_tiny_clip_t5
    >>> from paco_reward.vqascore import VQAScore
    >>> path = build_tiny_clip_t5("/tmp/tiny-clip-t5")                      # doctest: +SKIP
    >>> scorer = VQAScore.from_pretrained(path, tokenizer=path, dtype="float32")  # doctest: +SKIP

The weights are a function of their names and ``seed`` only (:func:`tensor_for`), not of
any library's initialisation order, so the same model can be rebuilt anywhere, including
inside the reference's own class.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "TINY_TEXTS",
    "build_tiny_clip_t5",
    "build_tiny_t5_tokenizer",
    "tensor_for",
    "tiny_clip_t5_config",
]

# Texts the tiny tokenizer knows word by word (anything else falls back to characters).
TINY_TEXTS = (
    "a red fox in a green forest",
    "two cats on a blue sofa",
    "a man riding a horse at sunset",
    "the same character in every panel",
    "a bowl of fruit on a wooden table",
)
_EXTRA_IDS = 100
_VOCAB_PADDING = 28  # FlanT5: config vocab 32,128, tokenizer 32,100


def _corpus_words() -> Counter:
    from paco_reward.vqascore import ANSWER, QUESTION_TEMPLATE, SYSTEM_MESSAGE, t5_chat_prompt

    lines = [SYSTEM_MESSAGE] + [t5_chat_prompt(QUESTION_TEMPLATE.format(t)) for t in TINY_TEXTS]
    lines += [ANSWER, "No", "yes", "no"]
    return Counter(word for line in lines for word in line.replace("<image>", " ").split())


def build_tiny_t5_tokenizer():
    """A T5 tokenizer (transformers' ``T5Tokenizer``) over a unigram vocabulary: every word
    of the VQAScore prompt and :data:`TINY_TEXTS` as one ``▁word`` piece (scored by its
    count), every printable ASCII character alone and after ``▁`` (scored far below), so any
    ASCII text encodes. Built, not trained: the same vocabulary in every process."""
    from transformers import T5Tokenizer

    words = _corpus_words()
    total = sum(words.values())
    pieces: dict[str, float] = {"▁": -2.0}
    for word, count in sorted(words.items()):
        pieces["▁" + word] = math.log(count / total)
    characters = [chr(c) for c in range(33, 127)]
    for k, ch in enumerate(characters):
        pieces.setdefault(ch, -20.0 - k * 1e-3)
        pieces.setdefault("▁" + ch, -21.0 - k * 1e-3)
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + list(pieces.items())
    vocab += [(f"<extra_id_{i}>", 0.0) for i in range(_EXTRA_IDS - 1, -1, -1)]
    return T5Tokenizer(vocab=vocab, extra_ids=_EXTRA_IDS, model_max_length=2048)


def tiny_clip_t5_config(tokenizer, vision_tower: str, clip_hidden_size: int) -> dict[str, Any]:
    """The ``config.json`` of the tiny model: the published checkpoint's fields (a FlanT5
    config, ``model_type`` ``clip_t5``, the LLaVA vision fields) at tiny sizes."""
    return {
        "architectures": ["CLIPT5ForConditionalGeneration"],
        "model_type": "clip_t5",
        "d_model": 32,
        "d_ff": 64,
        "d_kv": 8,
        "num_heads": 4,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "feed_forward_proj": "gated-gelu",
        "dense_act_fn": "gelu_new",
        "is_gated_act": True,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "layer_norm_epsilon": 1e-6,
        "dropout_rate": 0.1,
        "initializer_factor": 1.0,
        "is_encoder_decoder": True,
        "tie_word_embeddings": False,
        "decoder_start_token_id": 0,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "vocab_size": len(tokenizer) + _VOCAB_PADDING,
        "use_cache": False,
        "mm_vision_tower": vision_tower,
        "mm_hidden_size": clip_hidden_size,
        "mm_projector_type": "mlp2x_gelu",
        "mm_vision_select_layer": -2,
        "mm_vision_select_feature": "patch",
        "mm_use_im_start_end": False,
        "mm_use_im_patch_token": False,
        "image_aspect_ratio": "pad",
        "tune_mm_mlp_adapter": False,
        "freeze_mm_mlp_adapter": False,
        "use_mm_proj": True,
    }


def tensor_for(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """The tiny model's value of weight ``name``: drawn from a generator seeded by the name
    and ``seed`` (float32), scaled by what the weight is (norms near 1, embeddings and the
    language-model head wide enough that answers' probabilities differ from text to text)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    draw = rng.standard_normal(shape)
    if re.search(r"(layer_norm|layernorm|_norm)\.weight$|norm\d*\.weight$", name):
        value = 1.0 + 0.1 * draw
    elif name.endswith(".bias"):
        value = 0.02 * draw
    elif name == "shared.weight":
        value = draw
    elif name == "lm_head.weight":
        value = 0.5 * draw
    elif "relative_attention_bias" in name:
        value = 0.5 * draw
    else:
        value = draw / math.sqrt(shape[-1])
    return value.astype(np.float32)


def build_tiny_clip_t5(output_dir: str | Path, seed: int = 0, image_size: int = 32) -> Path:
    """Write a tiny CLIP-FlanT5 to ``output_dir`` (its vision tower, a tiny CLIP, in
    ``output_dir/vision_tower``, which ``mm_vision_tower`` names by absolute path).

    Args:
        output_dir: folder to create.
        seed: seed of the weights (:func:`tensor_for`) and of the tiny CLIP.
        image_size: the vision tower's input resolution (patch size 8).

    Returns:
        The folder: a CLIP-FlanT5 checkpoint with its tokenizer.

    Example:
        >>> path = build_tiny_clip_t5("/tmp/tiny-clip-t5", seed=0)   # doctest: +SKIP
    """
    import torch
    from safetensors.torch import load_file, save_file

    from paco_reward.architectures import default_dtype_set_to
    from paco_reward.clip_t5 import CLIPT5Config, CLIPT5ForConditionalGeneration
    from paco_reward.testing.clip import build_tiny_clip

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tower = build_tiny_clip(output_dir / "vision_tower", seed=seed, image_size=image_size)
    tower_config = json.loads((tower / "config.json").read_text())["vision_config"]
    tokenizer = build_tiny_t5_tokenizer()
    config = tiny_clip_t5_config(tokenizer, str(tower.resolve()), tower_config["hidden_size"])
    (output_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(output_dir)

    # The names and shapes of the reference class's state dict (aliases of the shared
    # embedding left out: they load from shared.weight), from the model on the meta device.
    from transformers import CLIPVisionConfig

    hf_config = CLIPT5Config(**{k: v for k, v in config.items() if k != "architectures"})
    hf_config.vision_config = CLIPVisionConfig.from_pretrained(tower).to_dict()
    with torch.device("meta"), default_dtype_set_to(torch.float32):
        model = CLIPT5ForConditionalGeneration(hf_config)
    aliases = {"embed_tokens.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    shapes = {n: tuple(p.shape) for n, p in model.state_dict(keep_vars=True).items()}
    shapes["lm_head.weight"] = shapes["shared.weight"]  # untied, as FlanT5's
    tower_weights = load_file(tower / "model.safetensors")
    state = {}
    for name, shape in sorted(shapes.items()):
        if name in aliases:
            continue
        if name.startswith("vision_tower.vision_tower."):  # the tower's own, as the reference's
            state[name] = tower_weights[name.removeprefix("vision_tower.vision_tower.")].clone()
        else:
            state[name] = torch.from_numpy(tensor_for(name, shape, seed))
    save_file(state, output_dir / "model.safetensors", metadata={"format": "pt"})
    return output_dir
