"""Image normalisation: every image the library touches goes through :func:`load_image`.

Accepted inputs: PIL images, paths, uint8 HWC (or HW) arrays, float HWC arrays in
[0, 1], float CHW tensors in [0, 1] and uint8 CHW tensors. The result is always an
RGB PIL image; transparent pixels are composited on white, as Qwen-VL's own
loader does. :func:`resize_for_model` then applies the model processor's pixel budget
(Qwen2.5-VL: 28 x 28 pixels per vision token; Qwen3-VL: 32 x 32). A family without one
(Gemma-3 resizes every image to a fixed 896 x 896) has no :class:`ImagePolicy`
(:func:`model_image_policy` gives ``None``): its own processor resizes, in-process and on a
server alike, so the image is passed on as it is.

    >>> import numpy as np
    >>> load_image(np.zeros((8, 6, 3), dtype=np.uint8)).size
    (6, 8)
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from paco_reward.errors import ConfigError, InputError, InvalidImageError

ImageInput = Image.Image | str | os.PathLike | np.ndarray | Any

# Qwen2.5-VL defaults (qwen-vl-utils): 4 to 16384 vision tokens of 28x28 pixels.
QWEN_MIN_PIXELS = 4 * 28 * 28
QWEN_MAX_PIXELS = 16384 * 28 * 28
# The repr of an in-memory file PIL writes into its errors, meaningless to a user.
_BUFFER_REPR = re.compile(r"<_io\.\w+ object at 0x[0-9a-fA-F]+>")


def _to_rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.split()[3])
        return background
    return image.convert("RGB")


def _array_to_pil(array: np.ndarray, name: str, channels_first: bool) -> Image.Image:
    if array.ndim == 3 and channels_first:
        array = np.moveaxis(array, 0, -1)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        layout = "CHW" if channels_first else "HWC"
        raise InvalidImageError(
            f"{name}: array of shape {tuple(array.shape)} is not an image; expected {layout} "
            "with 1, 3 or 4 channels (or HW grayscale)."
        )
    if array.size == 0 or 0 in array.shape[:2]:
        raise InvalidImageError(f"{name}: zero-size image (shape {tuple(array.shape)}).")
    if array.dtype == np.uint8:
        pass
    elif np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all() or array.min() < 0.0 or array.max() > 1.0:
            raise InvalidImageError(
                f"{name}: float image values must be finite and in [0, 1]; got range "
                f"[{np.nanmin(array):.3g}, {np.nanmax(array):.3g}]. Scale to [0, 1] or pass uint8."
            )
        array = np.round(array * 255.0).astype(np.uint8)
    else:
        raise InvalidImageError(
            f"{name}: unsupported array dtype {array.dtype}; pass uint8 in [0, 255] or float in [0, 1]."
        )
    # uint8 HW / HWx3 / HWx4 map to L / RGB / RGBA.
    return Image.fromarray(np.ascontiguousarray(array))


def decode_failure(err: BaseException) -> str:
    """Why PIL could not decode an image, without the in-memory buffer's repr PIL puts in its
    message ("cannot identify image file <_io.BytesIO object at 0x...>"): the caller names
    the input instead.

    Example:
        >>> decode_failure(UnidentifiedImageError("cannot identify image file <_io.BytesIO object at 0x7f>"))
        'not an image format PIL can read (PNG, JPEG, WebP, ...)'
    """
    if isinstance(err, UnidentifiedImageError):
        return "not an image format PIL can read (PNG, JPEG, WebP, ...)"
    return _BUFFER_REPR.sub("the data", str(err)) or type(err).__name__


def load_image(image: ImageInput, name: str = "image") -> Image.Image:
    """Return ``image`` as an RGB PIL image, or raise :class:`InvalidImageError` naming it.

    Args:
        image: PIL image, path, numpy array (uint8 HWC / float HWC in [0, 1]) or torch
            tensor (float CHW in [0, 1] / uint8 CHW).
        name: how the error message refers to this input (e.g. ``"pairs[3][1]"``).
    """
    if isinstance(image, Image.Image):
        if image.width == 0 or image.height == 0:
            raise InvalidImageError(f"{name}: zero-size image ({image.width}x{image.height}).")
        return _to_rgb(image)
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.is_file():
            raise InvalidImageError(f"{name}: no image file at {str(path)!r}.")
        try:
            with Image.open(path) as opened:
                opened.load()
                loaded = opened.copy()
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            raise InvalidImageError(
                f"{name}: {str(path)!r} is not a readable image ({decode_failure(err)}); give "
                "a PNG, JPEG or WebP file, or check the path."
            ) from None
        return load_image(loaded, name)
    if isinstance(image, (bytes, bytearray)):
        try:
            with Image.open(io.BytesIO(image)) as opened:
                opened.load()
                loaded = opened.copy()
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            raise InvalidImageError(
                f"{name}: its bytes are not a decodable image ({decode_failure(err)})."
            ) from None
        return load_image(loaded, name)
    if isinstance(image, np.ndarray):
        return load_image(_array_to_pil(image, name, channels_first=False), name)
    if type(image).__module__.startswith("torch"):
        import torch

        if isinstance(image, torch.Tensor):
            array = image.detach().cpu().numpy()
            return load_image(_array_to_pil(array, name, channels_first=True), name)
    raise InvalidImageError(
        f"{name}: expected a PIL image, a path, a numpy array or a torch tensor; "
        f"got {type(image).__name__}."
    )


@dataclass(frozen=True)
class ImagePolicy:
    """A Qwen-VL pixel budget: resize so both sides are multiples of ``factor`` (patch size x
    spatial merge: 28 for Qwen2.5-VL, 32 for Qwen3-VL) and the area lies in
    [min_pixels, max_pixels]. The defaults are Qwen2.5-VL's; :meth:`from_processor` reads a
    model's own."""

    min_pixels: int = QWEN_MIN_PIXELS
    max_pixels: int = QWEN_MAX_PIXELS
    factor: int = 28

    @classmethod
    def from_processor(
        cls, processor, min_pixels: int | None = None, max_pixels: int | None = None
    ) -> ImagePolicy:
        """The policy of a Qwen-VL processor (or its image processor): its ``size`` budget
        (``shortest_edge`` / ``longest_edge``, in pixels) and ``patch_size * merge_size``,
        optionally with a tighter/looser budget."""
        image_processor = getattr(processor, "image_processor", processor)
        size = image_processor.size
        return cls(
            min_pixels=min_pixels or size["shortest_edge"],
            max_pixels=max_pixels or size["longest_edge"],
            factor=image_processor.patch_size * image_processor.merge_size,
        )

    @property
    def processor_size(self) -> dict[str, int]:
        """``size=`` for the image processor, which re-applies its own budget: keep it ours."""
        return {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}

    def __post_init__(self) -> None:
        if self.min_pixels > self.max_pixels:
            raise ConfigError(
                f"min_pixels ({self.min_pixels}) must not exceed max_pixels ({self.max_pixels})."
            )


def has_pixel_budget(image_processor) -> bool:
    """Whether ``image_processor`` resizes as Qwen-VL's dynamic-resolution processors do: a
    ``size`` pixel budget (``shortest_edge`` / ``longest_edge``), a ``patch_size`` and a
    ``merge_size``.

    Example:
        >>> from transformers import Gemma3ImageProcessor, Qwen2VLImageProcessor
        >>> has_pixel_budget(Qwen2VLImageProcessor()), has_pixel_budget(Gemma3ImageProcessor())
        (True, False)
    """
    size = getattr(image_processor, "size", None) or {}
    return (
        getattr(image_processor, "patch_size", None) is not None
        and getattr(image_processor, "merge_size", None) is not None
        and "shortest_edge" in size
        and "longest_edge" in size
    )


def model_image_policy(
    processor, min_pixels: int | None = None, max_pixels: int | None = None
) -> ImagePolicy | None:
    """The :class:`ImagePolicy` images are resized to before the model's processor sees them:
    a Qwen-VL processor's pixel budget (:meth:`ImagePolicy.from_processor`), or ``None`` for
    a processor that resizes every image itself (Gemma-3's fixed square, ...).

    Raises:
        InputError: ``min_pixels``/``max_pixels`` given for a processor without a budget.

    Example:
        >>> from transformers import Gemma3ImageProcessor
        >>> model_image_policy(Gemma3ImageProcessor()) is None
        True
    """
    image_processor = getattr(processor, "image_processor", processor)
    if has_pixel_budget(image_processor):
        return ImagePolicy.from_processor(image_processor, min_pixels, max_pixels)
    if min_pixels is not None or max_pixels is not None:
        raise InputError(
            f"min_pixels={min_pixels} / max_pixels={max_pixels} set a Qwen-VL pixel budget, but "
            f"{type(image_processor).__name__} has none: it resizes every image itself (size "
            f"{getattr(image_processor, 'size', '?')}). Drop min_pixels and max_pixels."
        )
    return None


# Qwen-VL's processors refuse images whose long side exceeds 200x the short one.
MAX_ASPECT_RATIO = 200


def resize_for_model(
    image: Image.Image, policy: ImagePolicy | None, name: str = "image"
) -> Image.Image:
    """Resize exactly as ``qwen_vl_utils.fetch_image`` does (same rounding, same resampling),
    so scores match the model card's ``process_vision_info`` path. With ``policy=None`` (a
    model whose processor resizes itself, see :func:`model_image_policy`) ``image`` is
    returned as it is.

    An extreme aspect ratio under a small budget (a 3000x20 strip at 4 vision tokens) makes
    that rounding give a side of 0 pixels. Then the short side gets one patch (``factor``
    pixels) and the long side as many patches as the budget leaves, which the model's image
    processor keeps as it is.

    Raises:
        InvalidImageError: the aspect ratio exceeds 200 (what Qwen-VL processors accept).

    Example:
        >>> resize_for_model(Image.new("RGB", (3000, 20)), ImagePolicy(784, 4 * 784)).size
        (112, 28)
    """
    from qwen_vl_utils.vision_process import smart_resize

    if policy is None:
        return image
    ratio = max(image.size) / min(image.size)
    if ratio > MAX_ASPECT_RATIO:
        raise InvalidImageError(
            f"{name}: a {image.width}x{image.height} image has aspect ratio {ratio:.0f}:1; "
            f"Qwen-VL processors accept at most {MAX_ASPECT_RATIO}:1. Crop or pad it."
        )
    try:
        height, width = smart_resize(
            image.height,
            image.width,
            factor=policy.factor,
            min_pixels=policy.min_pixels,
            max_pixels=policy.max_pixels,
        )
    except (ValueError, AssertionError) as err:
        raise InvalidImageError(f"{name}: cannot be resized for the model ({err}).") from None
    if min(height, width) < policy.factor:
        patches = max(1, policy.max_pixels // policy.factor**2)
        long_side = policy.factor * patches
        height, width = (
            (policy.factor, long_side)
            if image.width >= image.height
            else (long_side, policy.factor)
        )
    if (width, height) == image.size:
        return image
    return image.resize((width, height))


def resize_as_requested(image: Image.Image, height: int, width: int, factor: int = 28) -> Image.Image:
    """``image`` resized as ``qwen_vl_utils.fetch_image`` does for a message that asks for
    ``resized_height`` / ``resized_width``: both rounded to multiples of ``factor``
    (``smart_resize``), then PIL's default filter. T2IS-Bench's released evaluation asks for
    512 x 512, so its judge sees 504 x 504.

    Example:
        >>> resize_as_requested(Image.new("RGB", (16, 16)), 512, 512).size
        (504, 504)
    """
    from qwen_vl_utils.vision_process import smart_resize

    height, width = smart_resize(height, width, factor=factor)
    return image if image.size == (width, height) else image.resize((width, height))


def image_hash(image: Image.Image) -> str:
    """A content hash of an RGB image (mode, size and pixels), for de-duplication and caches."""
    digest = hashlib.sha1(f"{image.mode}{image.size}".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()
