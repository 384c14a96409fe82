"""In-process scoring with transformers.

A batch of pairs is scored in three steps:

1. every *distinct* image is preprocessed and run through the vision tower once;
2. each pair's prompt is rendered with the model's own chat template (once per
   distinct instruction), its image placeholders are expanded to the image's
   token count, and the batch is left-padded;
3. one forward pass of the language model, fed the cached image features via
   ``mm_encoder_outputs``, gives the first-answer-token logits; only the last
   position's logits are computed (``logits_to_keep=1``).

This is token-for-token what ``processor(text, images)`` + ``model(**inputs)``
computes (the parity test checks it), minus the repeated vision work. The model is any
Qwen-VL family's (Qwen2.5-VL, Qwen3-VL, ...): its class comes from its config and its image
handling from its processor (:mod:`paco_reward.modeling`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from paco_reward.devices import default_device, resolve_device
from paco_reward.errors import InputError, PromptError
from paco_reward.hub import ADAPTER_KWARGS, HUB_KWARGS, check_kwargs, hub_kwargs
from paco_reward.images import ImagePolicy
from paco_reward.modeling import (
    ImageFeatures,
    image_features,
    join_image_features,
    load_adapter,
    load_evaluator,
)
from paco_reward.templates import build_messages
from paco_reward.yes_no import YesNoTokens, yes_probability

logger = logging.getLogger(__name__)

# (index of first image, index of second image, instruction text)
PairRequest = tuple[int, int, str]


def render_prompt_text(processor, instruction: str, num_images: int = 2) -> str:
    """The chat prompt for a pair as text, up to and including the generation prompt
    (``<|im_start|>assistant`` and its newline), with ONE ``<|image_pad|>`` per image. Every
    scorer (transformers, vLLM) and the SFT collator render through this, so a model is
    scored on exactly the prompt it was trained on.

    Example:
        >>> text = render_prompt_text(processor, render_instruction("rank"))  # doctest: +SKIP
    """
    return processor.apply_chat_template(
        build_messages(instruction, num_images=num_images),
        tokenize=False,
        add_generation_prompt=True,
    )


def render_prompt_ids(processor, instruction: str, num_images: int = 2) -> list[int]:
    """Token ids of :func:`render_prompt_text`.

    Example:
        >>> ids = render_prompt_ids(processor, render_instruction("rank"))  # doctest: +SKIP
    """
    text = render_prompt_text(processor, instruction, num_images)
    return processor.tokenizer.encode(text, add_special_tokens=False)


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


# Strategies of a transformers ``device_map`` (anything else names one device).
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
# Keys of ``model_kwargs`` that ``LocalBackend.from_pretrained`` takes as arguments of its own.
_OWN_ARGUMENTS = {
    **{name: f"{name}=" for name in (*HUB_KWARGS, "dtype", "device_map", "attn_implementation")},
    "torch_dtype": "dtype=",
    "device": "device= or device_map=",
}


def resolve_device_map(device_map: str | int | torch.device | dict | None):
    """A transformers ``device_map`` with a bare ``"cuda"`` given this process's index (see
    :mod:`paco_reward.devices`); strategies (``"auto"``, ...) and dicts are kept as given.

    Example:
        >>> resolve_device_map("cpu"), resolve_device_map("auto")
        (device(type='cpu'), 'auto')
    """
    if device_map is None or isinstance(device_map, dict) or device_map in DEVICE_MAP_STRATEGIES:
        return device_map
    return resolve_device(device_map)


def _placements(device_map) -> list[torch.device]:
    """The devices a ``device_map`` may put weights on (CUDA for a strategy when available)."""
    if isinstance(device_map, dict):
        values = [v for v in device_map.values() if v not in ("disk", "meta")]
    else:
        values = [device_map]
    placements = []
    for value in values:
        if value in DEVICE_MAP_STRATEGIES:
            placements.append(default_device())
        elif isinstance(value, int):
            placements.append(torch.device("cuda", value))
        else:
            placements.append(torch.device(value))
    return placements


def default_dtype(device: torch.device | None, device_map=None) -> torch.dtype:
    """bfloat16 when the weights go to a CUDA device, else float32.

    Example:
        >>> default_dtype(torch.device("cpu")), default_dtype(None, device_map={"": "cpu"})
        (torch.float32, torch.float32)
    """
    targets = _placements(device_map) if device_map is not None else [device]
    on_cuda = any(t is not None and t.type == "cuda" for t in targets)
    return torch.bfloat16 if on_cuda else torch.float32


class LocalBackend:
    """Holds a Qwen-VL-family model (Qwen2.5-VL, Qwen3-VL, ...) and its processor; scores
    pairs of pre-normalised images."""

    def __init__(
        self,
        model,
        processor,
        *,
        batch_size: int = 8,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        name: str = "local",
    ) -> None:
        self.model = model.eval()
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.batch_size = batch_size
        self.name = name
        self.yes_no = YesNoTokens.from_tokenizer(self.tokenizer, canonical=canonical_yes_no)
        self.image_policy = ImagePolicy.from_processor(processor, min_pixels, max_pixels)
        self.merge_length = processor.image_processor.merge_size**2
        self.image_token_id = processor.image_token_id
        self.pad_token_id = self.tokenizer.pad_token_id
        self._prompt_ids: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        path_or_id: str | Path,
        adapter: str | Path | None = None,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        *,
        batch_size: int = 8,
        canonical_yes_no: bool = True,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        merge_adapter: bool = True,
        revision: str | None = None,
        cache_dir: str | Path | None = None,
        token: str | bool | None = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        device_map: str | int | torch.device | dict | None = None,
        attn_implementation: str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        adapter_kwargs: Mapping[str, Any] | None = None,
    ) -> LocalBackend:
        """Load a Qwen-VL-family evaluator (the class its config names, through
        ``AutoModelForImageTextToText``), and optionally a PEFT LoRA ``adapter``, with its
        processor; the arguments are those of :meth:`paco_reward.PacoReward.from_pretrained`.

        Raises:
            TypeError: ``model_kwargs`` or ``adapter_kwargs`` holds a key that has its own
                argument here, or an unknown one.
            ValueError: both ``device`` and ``device_map`` are given.
            UnsupportedModelError: the model has no image input or no Qwen-VL image
                processing (checked before the weights load).
            YesNoTokenError: its tokenizer has no single-token "Yes"/"No" (idem).
            WeightsMismatchError: a weight of the model or the adapter is missing or
                unexpected (the model would score with randomly initialised weights).

        Example:
            >>> backend = LocalBackend.from_pretrained("X-GenGroup/PaCo-Reward-7B", revision="main",
            ...                                        device_map="auto")  # doctest: +SKIP
        """
        if device is not None and device_map is not None:
            raise InputError(
                f"Give device= (one device; got {device!r}) or device_map= (weights placed by "
                f"accelerate; got {device_map!r}), not both."
            )
        model_kwargs = check_kwargs(model_kwargs, name="model_kwargs", reserved=_OWN_ARGUMENTS)
        adapter_kwargs = check_kwargs(adapter_kwargs, name="adapter_kwargs", allowed=ADAPTER_KWARGS)
        hub = hub_kwargs(
            revision=revision,
            cache_dir=cache_dir,
            token=token,
            local_files_only=local_files_only,
            trust_remote_code=trust_remote_code,
        )
        device_map = resolve_device_map(device_map)
        device = resolve_device(device) if device_map is None else None
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        if dtype is None:
            dtype = default_dtype(device, device_map)
        load_kwargs = {**model_kwargs, **hub, "dtype": dtype}
        if device_map is not None:
            load_kwargs["device_map"] = device_map
        if attn_implementation:
            load_kwargs["attn_implementation"] = attn_implementation
        processor_source, processor_kwargs = path_or_id, hub
        if adapter is not None and (Path(adapter) / "tokenizer_config.json").is_file():
            processor_source = adapter
            processor_kwargs = {k: v for k, v in hub.items() if k != "revision"}
        model, processor = load_evaluator(
            path_or_id,
            processor_source=processor_source,
            processor_kwargs=processor_kwargs,
            **load_kwargs,
        )
        if adapter is not None:
            # Where to find files applies to the adapter too; its revision is its own.
            shared = {k: v for k, v in hub.items() if k in ADAPTER_KWARGS and k != "revision"}
            model = load_adapter(model, adapter, **shared, **adapter_kwargs)
            if merge_adapter:
                model = model.merge_and_unload()
        name = Path(str(adapter or path_or_id)).name
        if device is not None:
            model = model.to(device)
        return cls(
            model,
            processor,
            batch_size=batch_size,
            canonical_yes_no=canonical_yes_no,
            min_pixels=min_pixels,
            max_pixels=max_pixels,
            name=name,
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ encoding
    def preprocess_images(self, images: Sequence[Image.Image]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pixel patches and (t, h, w) grids of already-resized images, as the processor makes them."""
        out = self.processor.image_processor(
            images=list(images), size=self.image_policy.processor_size, return_tensors="pt"
        )
        return out["pixel_values"], out["image_grid_thw"]

    @torch.inference_mode()
    def encode_images(
        self, images: Sequence[Image.Image]
    ) -> tuple[list[ImageFeatures], torch.Tensor]:
        """Vision-tower features (one :class:`~paco_reward.modeling.ImageFeatures` per image:
        its merged embeddings, and Qwen3-VL's DeepStack features) and the images' grids."""
        features: list[ImageFeatures] = []
        grids: list[torch.Tensor] = []
        for start in range(0, len(images), self.batch_size):
            pixel_values, grid_thw = self.preprocess_images(images[start : start + self.batch_size])
            vision = self.model.get_image_features(
                pixel_values.to(self.device), grid_thw.to(self.device), return_dict=True
            )
            features.extend(image_features(vision))
            grids.append(grid_thw)
        return features, torch.cat(grids).to(self.device)

    def prompt_ids(self, instruction: str) -> list[int]:
        """Token ids of the rendered chat prompt for a pair, with one image placeholder per
        image (cached per instruction: the text does not depend on the images)."""
        if instruction not in self._prompt_ids:
            self._prompt_ids[instruction] = render_prompt_ids(self.processor, instruction)
        return self._prompt_ids[instruction]

    def build_inputs(
        self, pairs: Sequence[PairRequest], grids: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Left-padded ``input_ids``/``attention_mask``/``mm_token_type_ids`` and the
        ``image_grid_thw`` of every image occurrence, in order of appearance."""
        tokens_per_image = (grids.prod(-1) // self.merge_length).tolist()
        rows: list[list[int]] = []
        occurrences: list[int] = []
        for first, second, instruction in pairs:
            occurrences.extend((first, second))
            counts = (tokens_per_image[first], tokens_per_image[second])
            rows.append(
                expand_image_tokens(self.prompt_ids(instruction), self.image_token_id, counts)
            )
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):
            input_ids[i, width - len(ids) :] = torch.tensor(ids)
            attention_mask[i, width - len(ids) :] = 1
        input_ids = input_ids.to(self.device)
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask.to(self.device),
            "mm_token_type_ids": (input_ids == self.image_token_id).int(),
            "image_grid_thw": grids[occurrences],
            "occurrences": torch.tensor(occurrences),
        }

    # ------------------------------------------------------------------ scoring
    @torch.inference_mode()
    def first_token_logits(
        self, pairs: Sequence[PairRequest], features: list[ImageFeatures], grids: torch.Tensor
    ) -> torch.Tensor:
        """Next-token logits after the generation prompt, ``[len(pairs), vocab]``, from the
        images' :meth:`encode_images` features."""
        inputs = self.build_inputs(pairs, grids)
        occurrences = inputs.pop("occurrences").tolist()
        image_outputs = join_image_features([features[i] for i in occurrences])
        out = self.model(
            **inputs,
            mm_encoder_outputs={"image": image_outputs},
            logits_to_keep=1,
            use_cache=False,
        )
        return out.logits[:, -1, :]

    def score_batch(
        self, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
    ) -> np.ndarray:
        """Scores of ``pairs`` (indices into ``images``); each image is encoded once."""
        if not pairs:
            return np.zeros(0, dtype=np.float64)
        used = sorted({i for first, second, _ in pairs for i in (first, second)})
        features, grids = self.encode_images([images[i] for i in used])
        local = {global_index: k for k, global_index in enumerate(used)}
        scores: list[np.ndarray] = []
        for start in range(0, len(pairs), self.batch_size):
            chunk = [
                (local[a], local[b], text) for a, b, text in pairs[start : start + self.batch_size]
            ]
            logits = self.first_token_logits(chunk, features, grids)
            scores.append(yes_probability(logits, tokens=self.yes_no).double().cpu().numpy())
        return np.concatenate(scores)

    # ------------------------------------------------------------------ generation
    @torch.inference_mode()
    def generate(
        self,
        images: Sequence[Image.Image],
        instruction: str,
        max_new_tokens: int = 256,
        **generate_kwargs,
    ) -> str:
        """Greedy (by default) continuation for one pair, decoded without special tokens."""
        pixel_values, grid_thw = self.preprocess_images(images)
        inputs = self.build_inputs([(0, 1, instruction)], grid_thw.to(self.device))
        inputs.pop("occurrences")
        generate_kwargs.setdefault("do_sample", False)
        output = self.model.generate(
            **inputs,
            pixel_values=pixel_values.to(self.device, self.model.dtype),
            max_new_tokens=max_new_tokens,
            pad_token_id=self.pad_token_id,
            **generate_kwargs,
        )
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        return self.tokenizer.decode(new_tokens, skip_special_tokens=True)
