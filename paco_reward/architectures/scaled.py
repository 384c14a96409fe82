"""The shipped judge architectures at a fraction of their size, for benchmarks and GPU checks.

A ``shrink_<family>(config, scale)`` takes a shipped configuration (a dict, as
:func:`paco_reward.architectures.model_config` returns it) and multiplies its widths and
depths by ``scale``, keeping what the family's code requires of them (heads dividing the
width, rotary sections summing to the head size, the vision tower's output width the text
model's); each judge family's :class:`~paco_reward.judges.JudgeSpec` names its own.

    >>> from paco_reward.architectures import model_config
    >>> shrink_qwen2_5_vl(model_config("X-GenGroup/PaCo-Reward-7B"), 0.125)["num_hidden_layers"]
    4
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from paco_reward.errors import InputError

__all__ = [
    "scaled_depth",
    "scaled_heads",
    "scaled_indexes",
    "scaled_width",
    "shrink_gemma3",
    "shrink_qwen2_5_vl",
    "shrink_qwen3_vl",
    "split_sections",
]


def scaled_width(width: int, scale: float, multiple: int = 8) -> int:
    """``width * scale`` rounded to a multiple of ``multiple`` (at least one multiple)."""
    return max(multiple, round(width * scale / multiple) * multiple)


def scaled_depth(layers: int, scale: float) -> int:
    return max(1, round(layers * scale))


def scaled_heads(heads: int, head_dim: int, scale: float, groups: int = 1) -> tuple[int, int]:
    """Head count and head size whose product is about ``heads * head_dim * scale``: each
    shrinks by ``sqrt(scale)``; the count stays a multiple of ``groups`` (query heads per
    key/value head) and the size a multiple of 8 (rotary sections split it)."""
    root = math.sqrt(scale)
    return max(1, round(heads / groups * root)) * groups, scaled_width(head_dim, root)


def split_sections(sections: Sequence[int], total: int, multiple: int = 1) -> list[int]:
    """``sections`` rescaled to sum to ``total``, each a multiple of ``multiple``."""
    parts = [
        max(multiple, round(s * total / sum(sections) / multiple) * multiple) for s in sections[:-1]
    ]
    last = total - sum(parts)
    if last < multiple:
        raise InputError(f"cannot split {total} into {len(sections)} rotary sections.")
    return [*parts, last]


def shrink_qwen2_5_vl(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """Qwen2.5-VL's (shipped, flat) config with widths and depths times ``scale``, keeping its
    constraints: hidden = heads x head_dim, heads divisible by key/value heads, M-RoPE
    sections summing to head_dim / 2, the vision tower's output = the text width.

    Example:
        >>> from paco_reward.architectures import model_config
        >>> small = shrink_qwen2_5_vl(model_config("X-GenGroup/PaCo-Reward-7B"), 0.0625)
        >>> small["hidden_size"], small["num_hidden_layers"], small["rope_scaling"]["mrope_section"]
        (224, 2, [4, 6, 6])
    """
    out = copy.deepcopy(config)
    if scale == 1:
        return out
    heads, kv_heads = out["num_attention_heads"], out["num_key_value_heads"]
    groups = heads // kv_heads
    count, head_dim = scaled_heads(heads, out["hidden_size"] // heads, scale, groups)
    out.update(
        hidden_size=count * head_dim,
        num_attention_heads=count,
        num_key_value_heads=count // groups,
        intermediate_size=scaled_width(out["intermediate_size"], scale),
        num_hidden_layers=scaled_depth(out["num_hidden_layers"], scale),
    )
    out["max_window_layers"] = out["num_hidden_layers"]
    rope = out["rope_scaling"]
    rope["mrope_section"] = split_sections(rope["mrope_section"], head_dim // 2)
    vision = out["vision_config"]
    count, head_dim = scaled_heads(
        vision["num_heads"], vision["hidden_size"] // vision["num_heads"], scale
    )
    depth = scaled_depth(vision["depth"], scale)
    # the same share of full-attention blocks, at the same relative depths
    full = scaled_indexes(vision["fullatt_block_indexes"], vision["depth"], depth)
    vision.update(
        hidden_size=count * head_dim,
        num_heads=count,
        intermediate_size=scaled_width(vision["intermediate_size"], scale),
        depth=depth,
        fullatt_block_indexes=full,
        out_hidden_size=out["hidden_size"],
    )
    return out


def scaled_indexes(indexes: Sequence[int], depth: int, new_depth: int) -> list[int]:
    """Block ``indexes`` of a ``depth``-block stack mapped to the same relative depths of a
    ``new_depth``-block one (each within it; duplicates merged)."""
    return sorted({min(new_depth - 1, math.ceil((i + 1) * new_depth / depth) - 1) for i in indexes})


def shrink_qwen3_vl(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """Qwen3-VL's (shipped, nested) config with widths and depths times ``scale``, keeping its
    constraints: heads divisible by key/value heads, hidden = heads x head_dim, interleaved
    M-RoPE sections summing to head_dim / 2, the vision tower's 2-D rotary halves, its output
    = the text width, and the DeepStack blocks at the same relative depths of the shrunk tower.

    Example:
        >>> from paco_reward.architectures import model_config
        >>> small = shrink_qwen3_vl(model_config("Qwen/Qwen3-VL-8B-Instruct"), 0.0625)
        >>> text, vision = small["text_config"], small["vision_config"]
        >>> text["hidden_size"], text["num_hidden_layers"], vision["deepstack_visual_indexes"]
        (256, 2, [0, 1])
    """
    out = copy.deepcopy(config)
    if scale == 1:
        return out
    text = out["text_config"]
    heads, kv_heads = text["num_attention_heads"], text["num_key_value_heads"]
    groups = heads // kv_heads
    count, head_dim = scaled_heads(heads, text["head_dim"], scale, groups)
    text.update(
        hidden_size=count * head_dim,
        num_attention_heads=count,
        num_key_value_heads=count // groups,
        head_dim=head_dim,
        intermediate_size=scaled_width(text["intermediate_size"], scale),
        num_hidden_layers=scaled_depth(text["num_hidden_layers"], scale),
    )
    for key in ("rope_scaling", "rope_parameters"):  # transformers 4 / 5 spelling
        if isinstance(text.get(key), dict) and "mrope_section" in text[key]:
            text[key]["mrope_section"] = split_sections(text[key]["mrope_section"], head_dim // 2)
    vision = out["vision_config"]
    count, head_dim = scaled_heads(
        vision["num_heads"], vision["hidden_size"] // vision["num_heads"], scale
    )
    depth = scaled_depth(vision["depth"], scale)
    vision.update(
        hidden_size=count * head_dim,
        num_heads=count,
        intermediate_size=scaled_width(vision["intermediate_size"], scale),
        depth=depth,
        deepstack_visual_indexes=scaled_indexes(
            vision["deepstack_visual_indexes"], vision["depth"], depth
        ),
        out_hidden_size=text["hidden_size"],
    )
    return out


# Gemma-3-4B's text attention, which its published config leaves at transformers' defaults:
# 8 query heads of 256 over 4 key/value heads, its 262,208-token vocabulary.
_GEMMA3_ATTENTION = {
    "vocab_size": 262208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "layer_types": None,  # Gemma-3's five sliding-window layers, then one global
}


def shrink_gemma3(config: dict[str, Any], scale: float) -> dict[str, Any]:
    """Gemma-3's (shipped) config with the text model's width and depth and the SigLIP
    tower's width and depth times ``scale``; the text attention's heads (8 of 256, 4
    key/value heads), the vocabulary, the tower's input size, patches and heads kept.

    Example:
        >>> from paco_reward.architectures import model_config
        >>> small = shrink_gemma3(model_config("google/gemma-3-4b-it"), 0.125)
        >>> small["text_config"]["hidden_size"], small["vision_config"]["hidden_size"]
        (320, 144)
    """
    out = copy.deepcopy(config)
    text, vision = out["text_config"], out["vision_config"]
    text.update(
        _GEMMA3_ATTENTION,
        hidden_size=round(text["hidden_size"] * scale),
        intermediate_size=round(text["intermediate_size"] * scale),
        num_hidden_layers=scaled_depth(text["num_hidden_layers"], scale),
    )
    heads = vision["num_attention_heads"]
    vision.update(
        hidden_size=round(vision["hidden_size"] * scale / heads) * heads,
        intermediate_size=round(vision["intermediate_size"] * scale),
        num_hidden_layers=scaled_depth(vision["num_hidden_layers"], scale),
    )
    return out
