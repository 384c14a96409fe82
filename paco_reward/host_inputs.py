"""Inputs the model would derive from image grids and prompts on the device, made on the host.

transformers' Qwen-VL models compute, from ``image_grid_thw`` and the token ids, the vision
tower's rotary positions, attention boundaries (``cu_seqlens``), window order and position
interpolation, and the language model's 3-D rope positions; they do it with ``.tolist()``
and ``.item()`` on device tensors, so the host waits for the device at every vision block
and every prompt row. Here the same numbers come from transformers' own functions
(``transformers.vision_utils``, the model's ``get_rope_index``) run on host tensors, once per
shape, and the model takes them precomputed (transformers 5.19+ accepts every one of them):

* :class:`VisionGridInputs`: the vision tower's keyword inputs for a list of image grids;
* :class:`PromptRows`: a pair's expanded token ids and rope positions, by instruction and grids;
* :func:`causal_padding_mask`: the 4-D mask sdpa reads for a left-padded batch, built on the
  device from the padding counts (transformers' mask builder reads the 2-D mask back first).

    >>> inputs = VisionGridInputs(model, torch.device("cuda", 0))  # doctest: +SKIP
    >>> model.get_image_features(pixels, grids, **inputs([(1, 36, 36), (1, 36, 36)]))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from paco_reward.devices import host_to_device
from paco_reward.errors import PromptError, VisionAttentionError
from paco_reward.lru import LRUCache
from paco_reward.modeling import vision_tower
from paco_reward.vision_attention import CHECKED_TRANSFORMERS

__all__ = [
    "PromptRows",
    "VisionGridInputs",
    "causal_padding_mask",
    "knows_vision_tower",
    "padding_mask",
]

Grid = tuple[int, int, int]
# Vision towers whose forward reads the precomputed inputs below, and which besides the rotary
# positions and attention boundaries: Qwen2.5-VL's windows, Qwen3-VL's position interpolation.
_TOWER_INPUTS = {
    "Qwen2VisionTransformerPretrainedModel": (),
    "Qwen2_5_VisionTransformerPretrainedModel": ("windows",),
    "Qwen3VLVisionModel": ("interpolation",),
    "Qwen3VLMoeVisionModel": ("interpolation",),
}


def knows_vision_tower(name: str) -> bool:
    """Whether :class:`VisionGridInputs` precomputes the inputs of the vision tower class
    ``name`` (the Qwen-VL towers).

    Example:
        >>> knows_vision_tower("Qwen2_5_VisionTransformerPretrainedModel"), knows_vision_tower("Glm4vVisionModel")
        (True, False)
    """
    return name in _TOWER_INPUTS


class VisionGridInputs:
    """The keyword inputs a vision tower computes from its ``grid_thw``, for
    ``get_image_features(pixel_values, grid_thw, **inputs(grids))``: rotary position ids, the
    attention boundaries of its full and (Qwen2.5-VL) window blocks with their maximum
    lengths, the window order, (Qwen3-VL) the position-embedding interpolation. Computed by
    transformers' own functions on the host and cached by the grids; the tensors the tower
    indexes with are moved to ``device`` once, the boundaries stay on the host (the grouped
    attention reads them there; on the device for flash-attention's kernels).

    Raises:
        VisionAttentionError: the model's vision tower is not one whose inputs this knows.
    """

    def __init__(self, model, device: torch.device, cache_size: int = 64) -> None:
        visual = vision_tower(model)
        kind = type(visual).__name__
        if kind not in _TOWER_INPUTS:
            raise VisionAttentionError(
                f"{type(visual).__module__}.{kind} is not a vision tower the scorer knows "
                f"({', '.join(_TOWER_INPUTS)}, transformers {CHECKED_TRANSFORMERS}): it "
                "precomputes their grid inputs on the host."
            )
        self.visual = visual
        self.extras = _TOWER_INPUTS[kind]
        self.device = device
        self._cache = LRUCache(cache_size)

    @property
    def boundaries_device(self) -> torch.device | None:
        """Where the attention boundaries go, read at each call (the attention implementation
        can change after loading): the device for flash-attention's kernels, else ``None``
        (the host)."""
        from transformers.utils.generic import is_flash_attention_requested

        return self.device if is_flash_attention_requested(self.visual.config) else None

    def __call__(self, grids: Sequence[Grid]) -> dict[str, Any]:
        key = (tuple(tuple(int(v) for v in g) for g in grids), self.boundaries_device)
        return self._cache.get(key, lambda: self._compute(*key))

    def _compute(
        self, grids: tuple[Grid, ...], boundaries_device: torch.device | None
    ) -> dict[str, Any]:
        from transformers.vision_utils import (
            get_vision_attention_seqlens,
            get_vision_interpolation_indices_and_weights,
            get_vision_position_ids,
            get_vision_window_index,
        )

        visual, config = self.visual, self.visual.config
        grid_thw = torch.tensor(grids, dtype=torch.long)
        merge = visual.spatial_merge_size
        cu_seqlens, _ = get_vision_attention_seqlens(grid_thw, config)
        inputs: dict[str, Any] = {
            "image_position_ids": get_vision_position_ids(grid_thw, merge),
            "image_cu_seqlens": cu_seqlens,
            "image_max_seqlen": _longest(cu_seqlens),
        }
        if "windows" in self.extras:
            window_index, cu_window_seqlens = get_vision_window_index(
                grid_thw, merge, visual.window_size, visual.patch_size
            )
            inputs.update(
                image_window_index=window_index,
                image_cu_window_seqlens=cu_window_seqlens,
                image_max_window_seqlen=_longest(cu_window_seqlens),
            )
        if "interpolation" in self.extras:
            indices, weights = get_vision_interpolation_indices_and_weights(
                grid_thw,
                num_grid_per_side=visual.num_grid_per_side,
                mode=visual.interpolation_mode,
                align_corners=visual.interpolation_align_corners,
                spatial_merge_size=config.spatial_merge_size,
            )
            inputs.update(image_interp_indices=indices, image_interp_weights=weights)
        for name, value in inputs.items():
            if not isinstance(value, torch.Tensor):
                continue
            boundary = name.startswith("image_cu_")
            target = boundaries_device if boundary else self.device
            if target is not None:
                inputs[name] = host_to_device(value, target)
        return inputs


def _longest(cu_seqlens: torch.Tensor) -> int:
    return int((cu_seqlens[1:] - cu_seqlens[:-1]).max())


class PromptRows:
    """A pair's prompt row: its token ids with each image placeholder expanded to the image's
    token count, and the model's 3-D rope positions of those ids (``[3, length]``, from the
    model's own ``get_rope_index`` on the host), cached by (instruction, grid of each image).

    Args:
        model: the loaded model (its ``get_rope_index`` is used).
        prompt_ids: instruction -> the rendered prompt's ids with one placeholder per image.
        image_token_id: the placeholder's id.
        merge_length: vision patches per language token (``merge_size ** 2``).
    """

    def __init__(
        self,
        model,
        prompt_ids: Callable[[str], list[int]],
        image_token_id: int,
        merge_length: int,
        cache_size: int = 1024,
    ) -> None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.get_rope_index = base.model.get_rope_index
        self.prompt_ids = prompt_ids
        self.image_token_id = image_token_id
        self.merge_length = merge_length
        self._cache = LRUCache(cache_size)

    def __call__(self, instruction: str, grids: Sequence[Grid]) -> tuple[list[int], torch.Tensor]:
        key = (instruction, tuple(tuple(int(v) for v in g) for g in grids))
        return self._cache.get(key, lambda: self._compute(instruction, key[1]))

    def _compute(self, instruction: str, grids: tuple[Grid, ...]) -> tuple[list[int], torch.Tensor]:
        counts = [t * h * w // self.merge_length for t, h, w in grids]
        ids = expand_image_tokens(self.prompt_ids(instruction), self.image_token_id, counts)
        row = torch.tensor([ids], dtype=torch.long)
        positions, _ = self.get_rope_index(
            input_ids=row,
            mm_token_type_ids=(row == self.image_token_id).int(),
            image_grid_thw=torch.tensor(grids, dtype=torch.long),
            attention_mask=None,
        )
        return ids, positions[:, 0]


def expand_image_tokens(
    ids: Sequence[int], image_token_id: int, tokens_per_image: Sequence[int]
) -> list[int]:
    """Repeat the k-th ``image_token_id`` placeholder ``tokens_per_image[k]`` times (the
    number of merged vision tokens of the k-th image), as ``processor(text, images)`` does.

    Raises:
        ValueError: if the number of placeholders differs from ``len(tokens_per_image)``.

    Example:
        >>> expand_image_tokens([7, 9, 7], image_token_id=7, tokens_per_image=[2, 1])
        [7, 7, 9, 7]
    """
    placeholders = sum(1 for t in ids if t == image_token_id)
    if placeholders != len(tokens_per_image):
        raise PromptError(
            f"prompt has {placeholders} image placeholders but {len(tokens_per_image)} images "
            "were given; render the prompt with one image part per image."
        )
    counts = iter(tokens_per_image)
    out: list[int] = []
    for token in ids:
        if token == image_token_id:
            out.extend([token] * int(next(counts)))
        else:
            out.append(token)
    return out


def padding_mask(padding: torch.Tensor, width: int) -> torch.Tensor:
    """The boolean 2-D mask (``[batch, width]``, True on real tokens) of a left-padded batch
    from ``padding`` (``[batch]``: the pad tokens before each row), on its device.

    Example:
        >>> padding_mask(torch.tensor([1, 0]), 3).int()
        tensor([[0, 1, 1],
                [1, 1, 1]], dtype=torch.int32)
    """
    return torch.arange(width, device=padding.device)[None, :] >= padding[:, None]


def causal_padding_mask(padding: torch.Tensor, width: int) -> torch.Tensor:
    """The boolean 4-D mask (``[batch, 1, width, width]``, True where a query may attend)
    that transformers' ``create_causal_mask`` builds for sdpa from a left-padded batch's 2-D
    mask, from ``padding`` (``[batch]``: the pad tokens before each row) on its device,
    without reading anything back to the host.

    Example:
        >>> causal_padding_mask(torch.tensor([1]), 3)[0, 0].int()
        tensor([[0, 0, 0],
                [0, 1, 0],
                [0, 1, 1]], dtype=torch.int32)
    """
    position = torch.arange(width, device=padding.device)
    causal = position[None, :] <= position[:, None]
    return causal[None, None] & padding_mask(padding, width)[:, None, None, :]
