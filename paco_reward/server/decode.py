"""Untrusted image bytes → RGB PIL image, with the size checked *before* any pixel is decoded.

A request image is a base64 data URL. :func:`decode_data_url` rejects, with a
:class:`RequestError` naming the input:

* anything but ``data:image/...;base64,`` (remote URLs are never fetched);
* invalid base64, or more than ``max_bytes`` once decoded (checked on the encoded length);
* formats other than PNG, JPEG and WebP;
* dimensions above ``max_pixels`` (decompression bombs), read from the PNG ``IHDR`` /
  JPEG ``SOFn`` header by hand, or from PIL's lazy header parse for WebP, before decoding.

    >>> import base64
    >>> png_dimensions(base64.b64decode(TINY_PNG_1X1))
    (1, 1)
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import struct

from PIL import Image, UnidentifiedImageError

from paco_reward.errors import PacoError
from paco_reward.images import decode_failure, load_image

ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY_PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
_DATA_URL = re.compile(r"^data:image/[a-zA-Z0-9.+-]+;base64,", re.ASCII)
# JPEG start-of-frame markers carry the dimensions (C4 = DHT, C8 = JPG, CC = DAC are not SOF).
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


class RequestError(PacoError, ValueError):
    """A request the server refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def png_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR chunk, or None if ``data`` is not a PNG."""
    if not data.startswith(PNG_SIGNATURE):
        return None
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise RequestError("PNG image has no IHDR header chunk (truncated or corrupt).")
    return struct.unpack(">II", data[16:24])


def jpeg_dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's first SOF segment, or None if ``data`` is not a JPEG."""
    if not data.startswith(b"\xff\xd8"):
        return None
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise RequestError(f"JPEG image is corrupt (no marker at byte {pos}).")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD9)):  # stand-alone markers
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _SOF_MARKERS:
            if pos + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        if length < 2:
            raise RequestError("JPEG image is corrupt (segment length < 2).")
        pos += 2 + length
    raise RequestError("JPEG image has no frame header (truncated or corrupt).")


def _check_size(width: int, height: int, name: str, max_pixels: int) -> None:
    if width < 1 or height < 1:
        raise RequestError(f"{name}: image has zero size ({width}x{height}).")
    if width * height > max_pixels:
        raise RequestError(
            f"{name}: image is {width}x{height} = {width * height} pixels, above the server's "
            f"limit of {max_pixels}; resize it before sending.",
            status=413,
            code="image_too_large",
        )


def decode_image_bytes(data: bytes, name: str, max_pixels: int) -> Image.Image:
    """Check the header dimensions, then decode to RGB (PNG, JPEG or WebP only)."""
    size = png_dimensions(data) or jpeg_dimensions(data)
    if size is not None:
        _check_size(*size, name, max_pixels)
    try:
        with Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS) as opened:
            # Image.open parses the header only; no pixel is decoded before .load().
            _check_size(*opened.size, name, max_pixels)
            if getattr(opened, "n_frames", 1) > 1:
                raise RequestError(f"{name}: animated images are not accepted; send one frame.")
            opened.load()
            image = opened.copy()
    except Image.DecompressionBombError as err:
        raise RequestError(f"{name}: {err}", status=413, code="image_too_large") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        if isinstance(err, RequestError):
            raise
        reason = (
            "not in one of those formats"
            if isinstance(err, UnidentifiedImageError)
            else decode_failure(err)
        )
        raise RequestError(
            f"{name}: its bytes are not a decodable {'/'.join(ALLOWED_FORMATS)} image ({reason})."
        ) from None
    return load_image(image, name)


def decode_data_url(url: object, name: str, max_bytes: int, max_pixels: int) -> Image.Image:
    """Decode a ``data:image/...;base64,...`` URL into an RGB image, or raise RequestError."""
    if not isinstance(url, str):
        raise RequestError(f"{name}: image url must be a string; got {type(url).__name__}.")
    match = _DATA_URL.match(url)
    if match is None:
        shown = url[:40] + ("..." if len(url) > 40 else "")
        raise RequestError(
            f"{name}: only base64 data URLs ('data:image/png;base64,...') are accepted; got "
            f"{shown!r}. The server never fetches remote URLs."
        )
    encoded = url[match.end() :]
    if len(encoded) * 3 // 4 > max_bytes + 3:
        raise RequestError(
            f"{name}: encoded image is about {len(encoded) * 3 // 4} bytes, above the server's "
            f"limit of {max_bytes}.",
            status=413,
            code="image_too_large",
        )
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as err:
        raise RequestError(f"{name}: invalid base64 in the data URL ({err}).") from None
    return decode_image_bytes(data, name, max_pixels)
