"""In-process scoring of a model of any image-text-to-text family through its own processor.

Gemma-3 (``Gemma3ForConditionalGeneration``, the PaCo-GRPO guide's cross-family judge
Gemma-3-4B-IT) is the family this was written and tested for; a Qwen-VL family scores through
:class:`~paco_reward.local_backend.LocalBackend` instead (dynamic resolution, host-built rope
positions). What a family needs: transformers' ``AutoModelForImageTextToText`` loads it, its
processor holds an image processor and a chat template, and its tokenizer has single-token
"Yes"/"No".

The prompt is the same messages every backend renders
(:func:`~paco_reward.local_backend.render_prompt_text`, with the model's own chat template);
the images are passed as they are (no :class:`~paco_reward.images.ImagePolicy`: the
processor resizes them itself, Gemma-3 to a fixed 896 x 896); the score is the first answer
token's P(Yes) / (P(Yes) + P(No)) (:func:`~paco_reward.yes_no.yes_probability`). A call scores
its pairs in chunks of ``batch_size`` (sorted by prompt length, left-padded), one forward of
the language model per chunk, host work (the processor) in a worker thread:

* **vision reuse** where the family allows it: the model's forward takes precomputed image
  features (``mm_encoder_outputs``, transformers 5.19+) and the processor gives each image
  one ``pixel_values`` row and nothing else the model reads (Gemma-3: 256 tokens per image,
  whatever its size; pan-and-scan, which crops, is off unless a processor call asks for it).
  Then every distinct image goes through ``get_image_features`` once, ``vision_batch_size``
  at a time, and each pair's forward reads its images' features; the token ids of a prompt
  do not depend on its images, so the processor expands each instruction once;
* **otherwise a plain batched forward**: ``processor(text, images)`` and ``model(**inputs)``
  per chunk, the vision tower run for every image of every pair (a family whose image
  tokens depend on the image: tiles, crops, image sizes).

Both are what ``processor(text, images)`` + ``model(**inputs)`` computes for one pair (the
tests check it against a direct forward, per path).

    >>> backend = ProcessorBackend.from_pretrained("google/gemma-3-4b-it")  # doctest: +SKIP
    >>> backend.score_batch([img_a, img_b], [(0, 1, instruction)])           # doctest: +SKIP
    array([0.71])
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from paco_reward.devices import host_to_device, pin_for
from paco_reward.errors import VisionAttentionError
from paco_reward.images import model_image_policy
from paco_reward.local_backend import render_prompt_text
from paco_reward.lru import PER_INSTRUCTION_CACHE_SIZE, LRUCache
from paco_reward.modeling import ImageFeatures, image_features, join_image_features
from paco_reward.transformers_backend import PairRequest, TransformersBackend

logger = logging.getLogger(__name__)

__all__ = ["ProcessorBackend"]

# Images per vision-tower pass by default: half the Qwen-VL default, a Gemma-3 image being
# 4,096 patches where a 504 px Qwen-VL image is 1,296 (not measured: no GPU here).
DEFAULT_VISION_BATCH_SIZE = 8


class ProcessorBackend(TransformersBackend):
    """Holds an image-text-to-text model of any family and its processor; scores pairs of
    images as given (see the module's docstring for how).

    Args:
        model / processor: a loaded evaluator (:func:`~paco_reward.modeling.load_evaluator_model_and_processor`).
        batch_size: pairs per language-model forward.
        vision_batch_size: images per vision-tower pass when the vision output is reused
            (default :data:`DEFAULT_VISION_BATCH_SIZE`).
        canonical_yes_no / name: as in :meth:`paco_reward.PacoReward.from_pretrained`.
        reuse_vision: reuse each image's vision output across pairs where the family allows
            it (default); ``False`` runs the plain batched forward (the same scores, the
            vision tower once per image occurrence).

    Attributes:
        image_policy: ``None``: images are not resized before the processor.
        reuses_vision: ``reuse_vision`` and the model's forward takes precomputed image
            features (the reuse still needs one pixel row per image in a call, see the
            module).
        stage_timer: a :class:`~paco_reward.stage_timer.StageTimer` to time the stages into
            (``preprocess``, ``vision``, ``llm``), or ``None`` (the default).
    """

    default_vision_batch_size = DEFAULT_VISION_BATCH_SIZE

    def __init__(
        self,
        model,
        processor,
        *,
        batch_size: int = 8,
        vision_batch_size: int | None = None,
        canonical_yes_no: bool = True,
        name: str = "local",
        reuse_vision: bool = True,
    ) -> None:
        super().__init__(
            model,
            processor,
            batch_size=batch_size,
            vision_batch_size=vision_batch_size,
            canonical_yes_no=canonical_yes_no,
            name=name,
        )
        self.image_policy = None
        forward = inspect.signature(self.model.forward).parameters
        self._forward_inputs = set(forward)
        self.reuses_vision = (
            reuse_vision
            and "mm_encoder_outputs" in forward
            and hasattr(self.model, "get_image_features")
        )
        self._prompts: LRUCache[str] = LRUCache(PER_INSTRUCTION_CACHE_SIZE)
        self._prompt_rows: LRUCache[dict[str, list[int]]] = LRUCache(PER_INSTRUCTION_CACHE_SIZE)

    @classmethod
    def check_processor(cls, processor, source: str | Path) -> None:
        """Any processor :func:`~paco_reward.modeling.check_processor` accepts will do."""

    @classmethod
    def _backend_kwargs(cls, processor, **kwargs: Any) -> dict[str, Any]:
        """Refuses a pixel budget (the processor has none) and ``vision_attention="grouped"``
        (the grouped attention is the Qwen-VL towers') before the weights load."""
        model_image_policy(processor, kwargs.pop("min_pixels"), kwargs.pop("max_pixels"))
        if kwargs.pop("vision_attention", "auto") == "grouped":
            raise VisionAttentionError(
                f"vision_attention='grouped' is the Qwen-VL vision towers' window attention; "
                f"{type(processor).__name__}'s model scores through ProcessorBackend with its "
                "own vision attention. Leave vision_attention at 'auto' (or 'stock')."
            )
        return kwargs

    # ------------------------------------------------------------------ prompts
    def prompt_text(self, instruction: str) -> str:
        """The rendered chat prompt of a pair, one image placeholder per image (cached per
        instruction: the text does not depend on the images)."""

        def render() -> str:
            with self._processor_lock:
                return render_prompt_text(self.processor, instruction)

        return self._prompts.get(instruction, render)

    def processor_inputs(
        self, texts: Sequence[str], images: Sequence[Sequence[Image.Image]]
    ) -> dict[str, torch.Tensor]:
        """``processor(text, images)`` of a batch: the prompts (their own special tokens: the
        chat template writes them), left-padded, as host tensors."""
        with self._processor_lock:  # the worker and a caller may both be here
            return dict(
                self.processor(
                    text=list(texts),
                    images=[list(group) for group in images],
                    padding=True,
                    padding_side="left",
                    add_special_tokens=False,
                    return_tensors="pt",
                )
            )

    def _rows(self, instruction: str, images: Sequence[Image.Image]) -> dict[str, list[int]]:
        """The token-level inputs of one pair's prompt (``input_ids``, ``attention_mask`` and
        the family's image-token types), expanded by the processor once per instruction (with
        the vision reuse every image has the same token block)."""

        def make() -> dict[str, list[int]]:
            out = self.processor_inputs([self.prompt_text(instruction)], [images])
            width = out["input_ids"].shape
            return {
                key: value[0].tolist()
                for key, value in out.items()
                if isinstance(value, torch.Tensor) and value.shape == width
            }

        return self._prompt_rows.get(instruction, make)

    def _left_padded(self, rows: Sequence[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        """The rows as one left-padded batch: ``input_ids`` padded with the pad id, the other
        token-level inputs (mask, token types) with 0."""
        width = max(len(row["input_ids"]) for row in rows)
        batch = {}
        for key in rows[0]:
            fill = self.pad_token_id if key == "input_ids" else 0
            values = torch.full((len(rows), width), fill, dtype=torch.long)
            for i, row in enumerate(rows):
                values[i, width - len(row[key]) :] = torch.tensor(row[key])
            batch[key] = values
        return batch

    def _for_model(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Host tensors as the model takes them, floating ones (pixels) in its dtype, pinned
        when they go to a CUDA device (worker thread)."""
        device, dtype = self.device, self.model.dtype
        return {
            key: pin_for(value.to(dtype) if value.is_floating_point() else value, device)
            if isinstance(value, torch.Tensor)
            else value
            for key, value in inputs.items()
        }

    def _to_model(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """:meth:`_for_model`'s tensors on the model's device, without a host-device wait."""
        return {
            key: host_to_device(value, self.device) if isinstance(value, torch.Tensor) else value
            for key, value in inputs.items()
        }

    # ------------------------------------------------------------------ vision
    def _vision_chunk(self, images: Sequence[Image.Image]) -> torch.Tensor | None:
        """The pixels of a vision pass (worker thread), as the processor makes them for a
        prompt (its call-time image settings, not only the image processor's), or ``None``
        when it gives other than one ``pixel_values`` row per image, or another image input
        the model reads (crops, tiles, image sizes): then the features cannot be reused."""
        with self._host_stage("preprocess"):
            with self._processor_lock:
                out = self.processor(images=list(images), return_tensors="pt")
            text = out["input_ids"].shape if "input_ids" in out else None
            read = {
                key
                for key, value in out.items()
                if key in self._forward_inputs and getattr(value, "shape", None) != text
            }
            pixels = out.get("pixel_values")
            if read != {"pixel_values"} or pixels is None or pixels.shape[0] != len(images):
                return None
            return pin_for(pixels.to(self.model.dtype), self.device)

    def _vision_forward(self, pixels: torch.Tensor | None) -> list[ImageFeatures] | None:
        if pixels is None:
            return None
        with self._device_stage("vision"):
            pixels = host_to_device(pixels, self.device)
            return image_features(self.model.get_image_features(pixels, return_dict=True))

    @torch.inference_mode()
    def encode_images(self, images: Sequence[Image.Image]) -> list[ImageFeatures] | None:
        """Vision-tower features of ``images``, one :class:`~paco_reward.modeling.ImageFeatures`
        each, in their order; ``None`` when the family or these images allow no reuse."""
        if not self.reuses_vision:
            return None
        step = self.vision_batch_size
        chunks = [list(images[s : s + step]) for s in range(0, len(images), step)]
        done = self._pipelined(chunks, self._vision_chunk, self._vision_forward)
        if any(features is None for features in done):
            return None
        return [feature for features in done for feature in features]

    # ------------------------------------------------------------------ scoring
    def _chunk_logits(self, chunk: _Chunk, features: list[ImageFeatures] | None) -> torch.Tensor:
        with self._device_stage("llm"):
            inputs = self._to_model(chunk.inputs)
            if chunk.occurrences is not None:
                joined = join_image_features([features[i] for i in chunk.occurrences])
                inputs["mm_encoder_outputs"] = {"image": joined}
            out = self.model(**inputs, logits_to_keep=1, use_cache=False)
            return out.logits[:, -1, :]

    def _text_chunks(
        self, images: Sequence[Image.Image], requests: Sequence[PairRequest]
    ) -> tuple[list[ImageFeatures] | None, list[int], Callable[[list[int]], _Chunk]]:
        features = self.encode_images(images)

        def prepare(chunk: list[int]) -> _Chunk:
            with self._host_stage("preprocess"):
                chunk_requests = [requests[k] for k in chunk]
                groups = [(images[a], images[b]) for a, b, _ in chunk_requests]
                if features is None:
                    texts = [self.prompt_text(text) for _, _, text in chunk_requests]
                    return _Chunk(self._for_model(self.processor_inputs(texts, groups)), None)
                rows = [
                    self._rows(text, group)
                    for (_, _, text), group in zip(chunk_requests, groups)
                ]  # fmt: skip
                occurrences = [i for a, b, _ in chunk_requests for i in (a, b)]
                return _Chunk(self._for_model(self._left_padded(rows)), occurrences)

        return features, [len(self.prompt_text(text)) for _, _, text in requests], prepare

    # ------------------------------------------------------------------ generation
    def generation_inputs(
        self, images: Sequence[Image.Image], instruction: str
    ) -> dict[str, torch.Tensor]:
        inputs = self.processor_inputs([self.prompt_text(instruction)], [images])
        return self._to_model(self._for_model(inputs))


@dataclass
class _Chunk:
    """A language-model forward's host inputs: the batch (token-level inputs, and pixels on
    the plain path) and, with the vision reuse, the image (feature index) of each image
    placeholder in order."""

    inputs: dict[str, torch.Tensor]
    occurrences: list[int] | None
