"""Floating-point operations of scoring: what the hardware's bound allows.

A scoring call runs the vision tower once per distinct image and the language model once per
pair (prompt and image tokens, logits of the last position only). Its FLOPs are counted from
the model's own parameters and shapes (a multiply-add is 2 FLOPs):

* every linear layer: ``2 x its parameters x the tokens through it`` (the vision blocks and
  patch embedding: every patch; the mergers: every merged token; the language model's layers:
  every token; the LM head: one token);
* attention: ``4 x width x query tokens x key tokens`` per layer (QK^T and AV): the language
  model's causal attention over ``T(T+1)/2`` pairs, each vision segment (a window, or a
  whole image) over ``length^2``.

Norms, activations and rotary embeddings are left out (well under 1 %). For
PaCo-Reward-7B's shape and a pair of 504 px images with a 722-token prompt this is
12.95 TFLOP (language model 9.53, vision tower 3.42). ``pairs/s x FLOPs per pair`` over the GPU's
dense bf16 peak (:data:`BF16_PEAK_TFLOPS`) is the share of the hardware a row reaches.

    >>> flops = ScoringFlops.of(model)                               # doctest: +SKIP
    >>> flops.language(tokens=722) + 2 * flops.vision([(1, 36, 36)])  # doctest: +SKIP
    13.1e12
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

# NVIDIA's dense bf16 peak for the H100 SXM and the H200 (the same tensor cores), TFLOP/s.
BF16_PEAK_TFLOPS = 989.4

Grid = tuple[int, int, int]


def _parameters(module: torch.nn.Module | None) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


@dataclass(frozen=True)
class ScoringFlops:
    """A model's parameter counts and widths, enough to count a scoring call's FLOPs."""

    text_layer_parameters: int  # all decoder layers (and the final norm)
    text_layers: int
    attention_width: int  # heads x head dim of a decoder layer's queries
    head_parameters: int  # the LM head
    vision_token_parameters: int  # patch embedding + blocks: applied to every patch
    merger_parameters: int  # merger (+ DeepStack mergers): applied to every merged token
    vision_width: int
    vision_blocks: int
    full_attention_blocks: tuple[int, ...]  # the rest attend in windows (Qwen2.5-VL)
    window: int | None  # merged tokens a window side (window px / patch / merge)
    merge: int

    @classmethod
    def of(cls, model) -> ScoringFlops:
        """Counts of a loaded (or meta-device) Qwen-VL model."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        text, visual = base.model.language_model, base.model.visual
        config = getattr(base.config, "text_config", base.config)
        vision = visual.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        merge = vision.spatial_merge_size
        windowed = getattr(vision, "window_size", None)
        mergers = _parameters(visual.merger) + _parameters(
            getattr(visual, "deepstack_merger_list", None)
        )
        return cls(
            text_layer_parameters=_parameters(text) - _parameters(text.embed_tokens),
            text_layers=config.num_hidden_layers,
            attention_width=heads * head_dim,
            head_parameters=_parameters(base.lm_head),
            vision_token_parameters=_parameters(visual)
            - mergers
            - _parameters(getattr(visual, "pos_embed", None)),
            merger_parameters=mergers,
            vision_width=vision.hidden_size,
            vision_blocks=vision.depth,
            full_attention_blocks=tuple(
                getattr(vision, "fullatt_block_indexes", range(vision.depth))
            ),
            window=windowed // vision.patch_size // merge if windowed else None,
            merge=merge,
        )

    def language(self, tokens: int) -> float:
        """FLOPs of one prompt of ``tokens`` tokens (logits of the last position only)."""
        linear = 2 * self.text_layer_parameters * tokens + 2 * self.head_parameters
        attention = 4 * self.attention_width * tokens * (tokens + 1) / 2 * self.text_layers
        return linear + attention

    def vision(self, grids: Sequence[Grid]) -> float:
        """FLOPs of the vision tower on images of these (t, h, w) patch grids."""
        total = 0.0
        for t, h, w in grids:
            patches = t * h * w
            total += 2 * self.vision_token_parameters * patches
            total += 2 * self.merger_parameters * patches / self.merge**2
            full = 4 * self.vision_width * patches**2
            windowed = 4 * self.vision_width * sum(n**2 for n in self._windows(t, h, w))
            blocks = range(self.vision_blocks)
            total += sum(full if b in self.full_attention_blocks else windowed for b in blocks)
        return total

    def _windows(self, t: int, h: int, w: int) -> list[int]:
        """Patches of each attention window of one image (its whole grid without windows)."""
        if self.window is None:
            return [t * h * w]
        rows, cols, unit = h // self.merge, w // self.merge, self.merge**2
        sides_h = [min(self.window, rows - r) for r in range(0, rows, self.window)]
        sides_w = [min(self.window, cols - c) for c in range(0, cols, self.window)]
        return [a * b * unit for _ in range(t) for a in sides_h for b in sides_w]
