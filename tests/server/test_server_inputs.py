"""Every bad input gets a 4xx with a message naming the problem, and the server keeps serving.
Decompression bombs are refused from their header, before any pixel is decoded."""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import zlib

import httpx
import numpy as np
import pytest
from PIL import Image

from paco_reward.errors import ConfigError
from paco_reward.remote_backend import RemoteBackend
from paco_reward.server import ServerConfig, ServerThread, create_app
from paco_reward.server.decode import (
    RequestError,
    decode_data_url,
    jpeg_dimensions,
    png_dimensions,
)
from tests import raw_http

MODEL_NAME = "tiny-paco"  # served by the live_server fixture (tests/server/conftest.py)


def encode(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def url_of(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def png_bomb(width: int, height: int) -> bytes:
    """A small PNG whose header claims width x height (a decompression bomb's signature)."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 4096, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def jpeg_claiming(width: int, height: int) -> bytes:
    """A real JPEG with its frame header patched to claim width x height."""
    data = bytearray(encode(Image.new("RGB", (16, 8), (9, 9, 9)), "JPEG"))
    pos = data.index(b"\xff\xc0")
    data[pos + 5 : pos + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def chat_body(urls: list[str], text: str = "Do they match?", **extra) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}],
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": 3,
        **extra,
    }


@pytest.fixture(scope="module")
def strict_server(tiny_reward):
    config = ServerConfig(
        MODEL_NAME,
        max_body_bytes=200_000,
        max_image_pixels=64 * 64,
        max_images=4,
        max_pairs=3,
        max_instruction_chars=500,
    )
    with ServerThread(create_app(tiny_reward.backend, config)) as server:
        yield server


GOOD = url_of(encode(Image.new("RGB", (40, 40), (200, 10, 10))))
GOOD2 = url_of(encode(Image.new("RGB", (40, 40), (10, 10, 200))))

CHAT_CASES = [
    ("not json", b"{'model': oops", 400, "not valid JSON"),
    ("not an object", b"[1, 2]", 400, "must be a JSON object"),
    (
        "bad base64",
        chat_body([GOOD, "data:image/png;base64,@@@notbase64"]),
        400,
        r"\[1\]: invalid base64",
    ),
    (
        "not an image",
        chat_body([GOOD, url_of(b"hello, not an image at all")]),
        400,
        # names the input and why, not the BytesIO PIL read it from
        r"^messages\[0\]\.image_url\[1\]: its bytes are not a decodable .*\(not in one of "
        r"those formats\)\.$",
    ),
    (
        "gif refused",
        chat_body([GOOD, url_of(encode(Image.new("RGB", (8, 8)), "GIF"), "image/gif")]),
        400,
        "not a decodable",
    ),
    (
        "remote url",
        chat_body([GOOD, "http://169.254.169.254/latest"]),
        400,
        "never fetches remote URLs",
    ),
    ("three images", chat_body([GOOD, GOOD2, GOOD]), 400, "exactly 2 images per request; got 3"),
    ("one image", chat_body([GOOD]), 400, "exactly 2 images per request; got 1"),
    ("no text", chat_body([GOOD, GOOD2], text="  "), 400, "needs the instruction text"),
    (
        "two messages",
        {**chat_body([GOOD, GOOD2]), "messages": [{"role": "system", "content": "x"}] * 2},
        400,
        "exactly one user message",
    ),
    (
        "png bomb",
        chat_body([GOOD, url_of(png_bomb(50_000, 50_000))]),
        413,
        "50000x50000 = 2500000000 pixels",
    ),
    (
        "jpeg bomb",
        chat_body([GOOD, url_of(jpeg_claiming(30_000, 20_000), "image/jpeg")]),
        413,
        "30000x20000",
    ),
    (
        "real image too large",
        chat_body([GOOD, url_of(encode(Image.new("RGB", (100, 100))))]),
        413,
        "above the server's limit of 4096",
    ),
    (
        "long text",
        chat_body([GOOD, GOOD2], text="x" * 501),
        413,
        "501 characters, above the server's limit of 500",
    ),
    ("stream", chat_body([GOOD, GOOD2], stream=True), 400, "streaming is not supported"),
    ("n=2", chat_body([GOOD, GOOD2], n=2), 400, "only n=1"),
    (
        "max_tokens",
        chat_body([GOOD, GOOD2], max_tokens=10**6),
        400,
        "'max_tokens' must be an integer",
    ),
    ("top_logprobs", chat_body([GOOD, GOOD2], top_logprobs=50), 400, "'top_logprobs' must be"),
    ("token ids", chat_body([GOOD, GOOD2], logprob_token_ids=[10**9]), 400, "'logprob_token_ids'"),
    (
        "wrong model",
        {**chat_body([GOOD, GOOD2]), "model": "other"},
        404,
        "The model `other` does not exist",
    ),
    (
        "body too large",
        chat_body([GOOD, "data:image/png;base64," + "A" * 300_000]),
        413,
        "body exceeds",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "match"), CHAT_CASES, ids=[c[0] for c in CHAT_CASES]
)
def test_bad_chat_requests_get_4xx_and_server_keeps_serving(
    strict_server, case, body, status, match
):
    url = strict_server.base_url + "/chat/completions"
    if isinstance(body, bytes):
        response = httpx.post(url, content=body, headers={"content-type": "application/json"})
    else:
        response = httpx.post(url, json=body)
    assert response.status_code == status, response.text
    message = response.json()["error"]["message"]
    assert re.search(match, message), message
    ok = httpx.post(url, json=chat_body([GOOD, GOOD2]))
    assert (
        ok.status_code == 200 and ok.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    )


SCORE_CASES = [
    ("no images", {"images": [], "pairs": [[0, 1]]}, 400, "'images' must be a non-empty list"),
    ("too many images", {"images": [GOOD] * 5, "pairs": [[0, 1]]}, 413, "too many images: 5"),
    (
        "too many pairs",
        {"images": [GOOD, GOOD2], "pairs": [[0, 1, "x"]] * 4},
        413,
        "too many pairs: 4",
    ),
    ("bad index", {"images": [GOOD, GOOD2], "pairs": [[0, 2, "x"]]}, 400, r"pairs\[0\] must be"),
    (
        "missing prompt",
        {"images": [GOOD, GOOD2], "pairs": [[0, 1]]},
        400,
        "needs a non-empty prompt",
    ),
    (
        "unknown template",
        {"images": [GOOD, GOOD2], "pairs": [[0, 1, "x"]], "template": "nope"},
        400,
        "Unknown template 'nope'",
    ),
    (
        "bad image",
        {"images": [GOOD, "data:image/png;base64,AAAA"], "pairs": [[0, 1, "x"]]},
        400,
        r"images\[1\]",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "match"), SCORE_CASES, ids=[c[0] for c in SCORE_CASES]
)
def test_bad_score_requests_get_4xx(strict_server, case, body, status, match):
    response = httpx.post(strict_server.base_url + "/score", json={"model": MODEL_NAME, **body})
    assert response.status_code == status, response.text
    assert re.search(match, response.json()["error"]["message"])


def test_header_parsers_read_real_files():
    image = Image.new("RGB", (37, 21))
    assert png_dimensions(encode(image)) == (37, 21)
    assert jpeg_dimensions(encode(image, "JPEG")) == (37, 21)
    assert png_dimensions(encode(image, "JPEG")) is None and jpeg_dimensions(encode(image)) is None
    with pytest.raises(RequestError, match="no IHDR"):
        png_dimensions(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(RequestError, match="no frame header"):
        jpeg_dimensions(b"\xff\xd8\xff\xe0\x00\x10" + b"\x00" * 14)
    arr = np.asarray(decode_data_url(url_of(encode(image)), "x", 10_000, 10_000))
    assert arr.shape == (21, 37, 3)
    with pytest.raises(RequestError, match="about .* bytes, above the server's limit of 10"):
        decode_data_url(url_of(encode(image)), "x", 10, 10_000)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"served_model_name": " "}, "served_model_name must be a non-empty string"),
        ({"api_key": ""}, "api_key must be a non-empty string or None"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1; got 0"),
        ({"max_wait_ms": -1}, "max_wait_ms must be >= 0; got -1"),
        ({"max_top_logprobs": -2}, "max_top_logprobs must be >= 0; got -2"),
    ],
)
def test_server_config_validation(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ServerConfig(**{"served_model_name": "m", **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be >= 1; got 0"),
        ({"retries": -1}, "retries must be >= 0; got -1"),
        ({"timeout": 0}, "timeout must be > 0 seconds; got 0"),
        ({"top_logprobs": 21}, r"top_logprobs must be in \[0, 20\]"),
        ({"image_format": "gif"}, "image_format must be one of"),
    ],
)
def test_remote_backend_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RemoteBackend("http://127.0.0.1:9/v1", "m", **kwargs)


def test_deeply_nested_json_is_a_400_and_the_connection_keeps_serving(strict_server):
    """100,000 brackets: refused before the parser recurses; the same keep-alive connection
    then serves a normal request."""
    url = strict_server.base_url + "/chat/completions"
    with httpx.Client() as client:
        response = client.post(url, content=b"[" * 100_000 + b"]" * 100_000,
                               headers={"content-type": "application/json"})  # fmt: skip
        assert response.status_code == 400
        assert "nested deeper than 32 levels" in response.json()["error"]["message"]
        assert "Recursion" not in response.text
        ok = client.post(url, json=chat_body([GOOD, GOOD2]))
        assert ok.status_code == 200


def test_a_chunked_body_behind_a_small_content_length_is_a_413(strict_server):
    """A hostile framing (16 MiB in chunks, declared as 100 bytes): the bytes received are
    counted (paco_reward.server.limits, shared with paco-data annotate)."""
    framing = {"Content-Type": "application/json", "Transfer-Encoding": "chunked",
               "Content-Length": "100"}  # fmt: skip
    body = json.dumps(chat_body([GOOD, GOOD2])).encode()
    with raw_http.connect(strict_server.port) as sock:
        sock.sendall(raw_http.head("POST", "/v1/chat/completions", strict_server.port, framing))
        for chunk in raw_http.chunked(body[:-1] + b" " * 2**24 + b"}"):
            sock.sendall(chunk)
        status, _, payload = raw_http.read_response(sock)
    assert status == 413
    assert json.loads(payload)["error"]["code"] == "body_too_large"
    # The same request, small, in the same framing is scored.
    with raw_http.connect(strict_server.port) as sock:
        sock.sendall(raw_http.head("POST", "/v1/chat/completions", strict_server.port, framing))
        for chunk in raw_http.chunked(body):
            sock.sendall(chunk)
        assert raw_http.read_response(sock)[0] == 200


def test_internal_errors_are_logged_with_a_request_id_and_answered_without_details(
    tiny_reward, caplog
):
    """A failure inside the server: the client gets 500 with the request id and no exception
    text or path; the log has both."""
    from paco_reward.server.runner import ServerThread

    class Exploding:
        def __getattr__(self, name):
            return getattr(tiny_reward.backend, name)

        def first_token_outputs(self, *args, **kwargs):  # every scoring call's model path
            raise RuntimeError("disk full at /secret/model/path")

    with ServerThread(create_app(Exploding(), ServerConfig(MODEL_NAME))) as server:
        with caplog.at_level("ERROR"):
            response = httpx.post(server.base_url + "/chat/completions",
                                  json=chat_body([GOOD, GOOD2]),
                                  headers={"x-request-id": "req-42"})  # fmt: skip
    assert response.status_code == 500, response.text
    assert response.json()["error"]["message"] == "internal server error (request id req-42)"
    assert "secret" not in response.text and "RuntimeError" not in response.text
    assert response.headers["x-request-id"] == "req-42"
    assert "req-42" in caplog.text and "/secret/model/path" in caplog.text
