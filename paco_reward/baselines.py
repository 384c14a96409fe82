"""Baseline scorers for the human-alignment benchmarks.

A *scorer* is anything with ``score_pairs(pairs) -> np.ndarray``: ``pairs`` is a
sequence of ``(image_a, image_b)`` or ``(image_a, image_b, prompt)`` tuples (any
image type :func:`paco_reward.images.load_image` accepts) and the result holds one
float per pair, higher meaning "more consistent". :class:`paco_reward.PacoReward`
is one; this module adds the paper's image-similarity baselines:

- :class:`CLIPImageScorer` ("CLIP-I"): cosine similarity of ``transformers.CLIPModel``
  image embeddings, from any CLIP checkpoint folder or hub id.
- :class:`PixelScorer`: ``1 - mean |a - b| / 255`` on images resized to a common size;
  a model-free floor that any learned scorer should beat.
- :class:`DreamSimScorer` / :class:`OpenCLIPScorer`: adapters for ``dreamsim`` and
  ``open_clip``, usable only where those packages are installed (never required).

Image-only scorers ignore the prompt. Every scorer encodes each distinct image once
(images are de-duplicated by content hash).

    >>> import numpy as np
    >>> red, blue = np.full((8, 8, 3), (255, 0, 0), np.uint8), np.full((8, 8, 3), (0, 0, 255), np.uint8)
    >>> PixelScorer(size=8).score_pairs([(red, red), (red, blue)]).round(3).tolist()
    [1.0, 0.333]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from PIL import Image

from paco_reward.errors import InputError, InputTypeError, MissingDependencyError
from paco_reward.images import ImageInput, image_hash, load_image

logger = logging.getLogger(__name__)


@runtime_checkable
class PairScorer(Protocol):
    """What the benchmarks need from a scorer."""

    def score_pairs(self, pairs: Sequence[tuple]) -> np.ndarray: ...


def _unique_images(
    pairs: Sequence[tuple],
) -> tuple[list[Image.Image], list[tuple[int, int]]]:
    """Load every image once (de-duplicated by content) and map pairs to indices."""
    images: list[Image.Image] = []
    index: dict[str, int] = {}
    mapped: list[tuple[int, int]] = []

    def add(image: ImageInput, name: str) -> int:
        pil = load_image(image, name)
        key = image_hash(pil)
        if key not in index:
            index[key] = len(images)
            images.append(pil)
        return index[key]

    for k, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
            raise InputTypeError(
                f"pairs[{k}] must be (image_a, image_b[, prompt]); got {type(pair).__name__}."
            )
        mapped.append((add(pair[0], f"pairs[{k}][0]"), add(pair[1], f"pairs[{k}][1]")))
    return images, mapped


class _EmbeddingScorer:
    """Cosine similarity of L2-normalised embeddings; subclasses provide ``_embed``."""

    batch_size: int = 16

    def _embed(self, images: list[Image.Image]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def embed(self, images: Sequence[ImageInput]) -> np.ndarray:
        """L2-normalised embeddings, one row per image (float64)."""
        pils = [load_image(img, f"images[{k}]") for k, img in enumerate(images)]
        rows = [
            self._embed(pils[s : s + self.batch_size]) for s in range(0, len(pils), self.batch_size)
        ]
        emb = np.concatenate(rows, axis=0).astype(np.float64) if rows else np.zeros((0, 1))
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return emb / np.where(norms > 0, norms, 1.0)

    def score_pairs(self, pairs: Sequence[tuple]) -> np.ndarray:
        """Cosine similarity in [-1, 1] of each pair's image embeddings (prompts ignored)."""
        images, mapped = _unique_images(pairs)
        if not mapped:
            return np.zeros(0, dtype=np.float64)
        emb = self.embed(images)
        a = np.asarray([i for i, _ in mapped])
        b = np.asarray([j for _, j in mapped])
        return np.clip((emb[a] * emb[b]).sum(axis=1), -1.0, 1.0)


class CLIPImageScorer(_EmbeddingScorer):
    """CLIP-I: cosine similarity of CLIP image embeddings (``CLIPModel.get_image_features``).

    Args:
        model_name_or_path: any ``transformers`` CLIP checkpoint (folder or hub id), e.g.
            ``openai/clip-vit-large-patch14`` or a folder from
            :func:`paco_reward.testing.clip.build_tiny_clip`.
        device: defaults to this process's device (``cuda:<LOCAL_RANK>`` when CUDA is
            available, else the CPU; see :mod:`paco_reward.devices`).
        dtype: defaults to float32.
        batch_size: images per forward pass.

    Example:
        >>> scorer = CLIPImageScorer("openai/clip-vit-large-patch14")     # doctest: +SKIP
        >>> scorer.score_pairs([("ref.png", "cand.png")])                  # doctest: +SKIP
        array([0.87])
    """

    def __init__(
        self,
        model_name_or_path: str | Path,
        device=None,
        dtype=None,
        batch_size: int = 16,
    ) -> None:
        import torch
        from transformers import CLIPImageProcessor, CLIPModel

        from paco_reward.devices import resolve_device

        if batch_size < 1:
            raise InputError(f"batch_size={batch_size} must be >= 1.")
        self.device = resolve_device(device)
        self.dtype = dtype or torch.float32
        self.model = CLIPModel.from_pretrained(model_name_or_path, dtype=self.dtype)
        self.model.to(self.device).eval()
        self.processor = CLIPImageProcessor.from_pretrained(model_name_or_path)
        self.batch_size = batch_size
        self.name = f"CLIP-I ({Path(str(model_name_or_path)).name})"

    def _embed(self, images: list[Image.Image]) -> np.ndarray:
        import torch

        inputs = self.processor(images=images, return_tensors="pt")
        pixel_values = inputs["pixel_values"].to(self.device, self.dtype)
        with torch.inference_mode():
            out = self.model.get_image_features(pixel_values=pixel_values)
        features = out if isinstance(out, torch.Tensor) else out.pooler_output
        return features.float().cpu().numpy()


class PixelScorer:
    """Pixel-space similarity: both images are resized to ``size`` x ``size`` RGB (bilinear)
    and the score is ``1 - mean |a - b| / 255`` in [0, 1] (1 for identical pixels).

    Args:
        size: common side length the images are resized to before comparing.

    Example:
        >>> PixelScorer(size=32).score_pairs([("a.png", "b.png")])   # doctest: +SKIP
    """

    name = "Pixel L1"

    def __init__(self, size: int = 64) -> None:
        if size < 1:
            raise InputError(f"size={size} must be a positive side length in pixels.")
        self.size = size

    def _array(self, image: Image.Image) -> np.ndarray:
        resized = image.resize((self.size, self.size), Image.Resampling.BILINEAR)
        return np.asarray(resized, dtype=np.float64)

    def score_pairs(self, pairs: Sequence[tuple]) -> np.ndarray:
        """``1 - mean |a - b| / 255`` per pair (prompts ignored)."""
        images, mapped = _unique_images(pairs)
        arrays = [self._array(img) for img in images]
        return np.asarray(
            [1.0 - np.abs(arrays[i] - arrays[j]).mean() / 255.0 for i, j in mapped],
            dtype=np.float64,
        )


def _require(module: str, scorer: str, install: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(
            f"{scorer} needs the optional package {module!r}, which is not installed. "
            f"Install it with `pip install {install}`, or use the 'clip' or 'pixel' scorer."
        ) from None


class DreamSimScorer(_EmbeddingScorer):
    """DreamSim similarity, ``1 - distance`` (needs ``pip install dreamsim``; never required).

    Args:
        cache_dir: where DreamSim keeps its weights (``dreamsim(pretrained=True, cache_dir=...)``
            downloads them there on first use).
        device: defaults to this process's device (see :mod:`paco_reward.devices`).
        dino_type: DreamSim backbone, e.g. ``"ensemble"`` (default).

    Example:
        >>> DreamSimScorer("./dreamsim_cache").score_pairs([("a.png", "b.png")])  # doctest: +SKIP
    """

    name = "DreamSim"

    def __init__(
        self, cache_dir: str | Path = "./models", device=None, dino_type: str = "ensemble"
    ) -> None:
        dreamsim = _require("dreamsim", "DreamSimScorer", "dreamsim")
        from paco_reward.devices import resolve_device

        self.device = resolve_device(device)
        self.model, self._preprocess = dreamsim.dreamsim(
            pretrained=True,
            cache_dir=str(cache_dir),
            device=str(self.device),
            dreamsim_type=dino_type,
        )

    def _embed(self, images: list[Image.Image]) -> np.ndarray:
        import torch

        batch = torch.cat([self._preprocess(img) for img in images]).to(self.device)
        with torch.inference_mode():
            return self.model.embed(batch).float().cpu().numpy()

    def score_pairs(self, pairs: Sequence[tuple]) -> np.ndarray:
        """``1 - DreamSim distance`` (DreamSim's distance is ``1 - cosine`` of its embeddings)."""
        return super().score_pairs(pairs)


class OpenCLIPScorer(_EmbeddingScorer):
    """Cosine similarity of ``open_clip`` image embeddings (needs ``pip install open_clip_torch``).

    Args:
        model_name: an open_clip architecture, e.g. ``"ViT-B-32"``.
        pretrained: its weights tag, e.g. ``"laion2b_s34b_b79k"``.
        device: defaults to this process's device (see :mod:`paco_reward.devices`).

    Example:
        >>> OpenCLIPScorer("ViT-B-32", "laion2b_s34b_b79k").score_pairs(pairs)  # doctest: +SKIP
    """

    def __init__(self, model_name: str, pretrained: str | None = None, device=None) -> None:
        open_clip = _require("open_clip", "OpenCLIPScorer", "open_clip_torch")
        from paco_reward.devices import resolve_device

        self.device = resolve_device(device)
        self.model, _, self._preprocess = open_clip.create_model_and_transforms(
            model_name, pretrained=pretrained, device=self.device
        )
        self.model.eval()
        self.name = f"OpenCLIP ({model_name})"

    def _embed(self, images: list[Image.Image]) -> np.ndarray:
        import torch

        batch = torch.stack([self._preprocess(img) for img in images]).to(self.device)
        with torch.inference_mode():
            return self.model.encode_image(batch).float().cpu().numpy()


class FunctionScorer:
    """Wrap a function ``f(image_a, image_b) -> float`` (PIL images) as a scorer.

    Example:
        >>> import numpy as np
        >>> s = FunctionScorer(lambda a, b: float(a.size == b.size))
        >>> s.score_pairs([(np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.uint8))]).tolist()
        [1.0]
    """

    def __init__(self, fn: Callable[[Image.Image, Image.Image], float], name: str = "function"):
        self.fn = fn
        self.name = name

    def score_pairs(self, pairs: Sequence[tuple]) -> np.ndarray:
        images, mapped = _unique_images(pairs)
        return np.asarray([float(self.fn(images[i], images[j])) for i, j in mapped])
