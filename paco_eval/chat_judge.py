"""Chat judges: a VLM that answers a text prompt about some images, for the benchmarks whose
released protocol asks a model for text (VIEScore's JSON scores, VCReward-Bench's winner).

Two kinds, one protocol (:class:`ChatJudge`: ``chat(images, text) -> str`` plus a ``name`` and
a ``protocol()`` dict written into each report):

* :class:`OpenAIChatJudge`: any OpenAI-compatible chat-completions endpoint (``vllm serve``
  of Qwen2.5-VL-72B-Instruct-AWQ, GPT-4.1 with ``OPENAI_API_KEY``, ``paco-reward serve``'s
  generation, the gateway in front of several). Greedy (``temperature=0``) unless told
  otherwise; transient failures (connection refused, timeouts, 408/429/5xx) are retried under
  :class:`paco_reward.retry.RetryPolicy`, the library's one retry policy, and once spent raise
  :class:`JudgeUnavailableError` naming the URL: a benchmark stage stops there, with every
  answer it already stored kept, and a re-run resumes.
* :class:`InProcessChatJudge`: a model loaded in this process (a ``PacoReward`` or any scoring
  backend with ``generate``, e.g. ``TransformersBackend``), greedy decoding through the
  library's ``generate``.

Content order is part of a prompt: Step1X-Edit's Qwen route puts the images first (what
``paco_reward.templates.build_messages`` does), its GPT-4.1 route the text first
(``text_first=True``).

    >>> judge = OpenAIChatJudge("http://127.0.0.1:8000/v1", "Qwen2.5-VL-72B-Instruct-AWQ")  # doctest: +SKIP
    >>> judge.chat([source, edited], "Rate the edit...")                                    # doctest: +SKIP
    '{"score": [8, 7], "reasoning": "..."}'
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import httpx
from PIL import Image

from paco_reward.errors import InputError, RewardServerError, TransientError
from paco_reward.images import load_image, resize_for_model
from paco_reward.retry import RETRY_STATUS, RetryPolicy, retry_after_seconds

__all__ = ["ChatJudge", "InProcessChatJudge", "JudgeUnavailableError", "OpenAIChatJudge"]


class JudgeUnavailableError(RewardServerError):
    """A chat judge's endpoint is down or rejects the requests (after the retry policy). The
    message names the URL; every answer stored before it stays stored, so the stage resumes
    where it stopped once the endpoint is back."""


@runtime_checkable
class ChatJudge(Protocol):
    """What a benchmark needs of a chat judge."""

    name: str

    def chat(self, images: Sequence[Image.Image], text: str) -> str:
        """The judge's answer text for ``images`` and the prompt ``text``."""
        ...

    def protocol(self) -> dict[str, Any]:
        """How the judge was called (model, endpoint, decoding), for the report."""
        ...


def _data_url(image: Image.Image, image_format: str) -> str:
    buffer = io.BytesIO()
    if image_format == "png":
        image.save(buffer, format="PNG")
        mime = "image/png"
    else:  # Step1X-Edit's GPT route encodes JPEG (PIL's default quality)
        image.convert("RGB").save(buffer, format="JPEG")
        mime = "image/jpeg"
    return f"data:{mime};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


class OpenAIChatJudge:
    """A chat judge behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"`` or
            ``"https://api.openai.com/v1"``.
        model: the served model name (GPT-4.1 is ``"gpt-4.1"``).
        api_key: the key; by default read from the environment variable ``api_key_env``.
        api_key_env: variable holding the key (``OPENAI_API_KEY``); unset means no key.
        text_first: put the prompt text before the images (Step1X-Edit's GPT route) instead
            of after them (its Qwen route, the default).
        image_format: ``"png"`` (lossless, the Qwen route) or ``"jpeg"`` (the GPT route).
        max_tokens: answer length limit (512 as the Qwen route; the GPT route uses 1400).
        temperature: 0 is greedy; ``None`` sends no temperature (the GPT route's default).
        seed: sent as the request's ``seed`` when given (vLLM and OpenAI accept it).
        timeout: seconds per request.
        retries: retries after the first attempt on transient failures.
        backoff: first back-off delay in seconds.

    Raises:
        JudgeUnavailableError: (from :meth:`chat`) the endpoint is unreachable after the
            retries, or rejects the request; the message names the URL.

    Example:
        >>> judge = OpenAIChatJudge("https://api.openai.com/v1", "gpt-4.1", text_first=True,
        ...                         image_format="jpeg", max_tokens=1400, temperature=None)  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        text_first: bool = False,
        image_format: str = "png",
        max_tokens: int = 512,
        temperature: float | None = 0.0,
        seed: int | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.strip():
            raise InputError(
                f"base_url must be an API root like http://host:8000/v1; got {base_url!r}."
            )
        if image_format not in ("png", "jpeg"):
            raise InputError(f"image_format must be 'png' or 'jpeg'; got {image_format!r}.")
        if max_tokens < 1:
            raise InputError(f"max_tokens must be >= 1; got {max_tokens}.")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"chat:{model}"
        self.text_first = text_first
        self.image_format = image_format
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.retry_policy = RetryPolicy(retries, backoff, max(8.0, backoff), seed=0)
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self.requests_sent = 0

    def protocol(self) -> dict[str, Any]:
        """Model, endpoint and decoding settings (no key)."""
        return {
            "kind": "openai_chat",
            "model": self.model,
            "base_url": self.base_url,
            "text_first": self.text_first,
            "image_format": self.image_format,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
        }

    def payload(self, images: Sequence[Image.Image], text: str) -> dict[str, Any]:
        """The request body for one prompt (images as data URLs in the configured order)."""
        parts: list[dict] = [{"type": "image", "image": img} for img in images]
        text_part = {"type": "text", "text": text}
        content = [text_part, *parts] if self.text_first else [*parts, text_part]
        return self.messages_payload([{"role": "user", "content": content}])

    def messages_payload(self, messages: Sequence[dict]) -> dict[str, Any]:
        """The request body for chat ``messages`` whose image parts are
        ``{"type": "image", "image": PIL.Image}`` (sent as data URLs, in place): a prompt
        that interleaves text and images (VCReward-Bench's) keeps its own order."""
        converted = []
        for message in messages:
            content = message["content"]
            if isinstance(content, list):
                content = [
                    {
                        "type": "image_url",
                        "image_url": {"url": _data_url(p["image"], self.image_format)},
                    }
                    if p.get("type") == "image"
                    else p
                    for p in content
                ]
            converted.append({**message, "content": content})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": converted,
            "max_tokens": self.max_tokens,
        }
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    def _send(self, body: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        try:
            self.requests_sent += 1
            response = self._client.post(url, json=body)
        except httpx.TransportError as err:
            raise TransientError(f"{type(err).__name__}: {err}") from None
        if response.status_code in RETRY_STATUS:
            raise TransientError(
                f"HTTP {response.status_code}: {response.text[:200]}",
                retry_after=retry_after_seconds(response.headers),
            )
        if response.status_code >= 400:
            raise JudgeUnavailableError(
                f"The chat judge at {url} (model {self.model!r}) rejected the request with HTTP "
                f"{response.status_code}: {response.text[:300]}. Check the model name and key "
                f"(api_key= or ${'{'}OPENAI_API_KEY{'}'})."
            )
        try:
            return response.json()
        except ValueError:
            raise JudgeUnavailableError(
                f"The chat judge at {url} answered non-JSON: {response.text[:200]!r}."
            ) from None

    def chat(self, images: Sequence[Image.Image], text: str) -> str:
        """The answer text (``""`` when the endpoint returns an empty message; the caller's
        parser decides what an empty answer means)."""
        return self._complete(self.payload(images, text))

    def chat_messages(self, messages: Sequence[dict]) -> str:
        """The answer to chat ``messages`` (see :meth:`messages_payload`)."""
        return self._complete(self.messages_payload(messages))

    def _complete(self, body: dict) -> str:
        try:
            for attempt in self.retry_policy.retrying():
                with attempt:
                    answer = self._send(body)
                    break
        except TransientError as err:
            raise JudgeUnavailableError(
                f"The chat judge at {self.base_url}/chat/completions (model {self.model!r}) is "
                f"unreachable after {self.retry_policy.retries + 1} attempts: {err}. Start the "
                "server (or fix the judge's URL); the answers already stored are kept and a re-run "
                "resumes."
            ) from None
        try:
            return answer["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise JudgeUnavailableError(
                f"The chat judge at {self.base_url} returned no message: {str(answer)[:300]!r}."
            ) from None

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()


class InProcessChatJudge:
    """A chat judge run in this process through the library's ``generate`` (greedy).

    Args:
        model: anything with ``generate(images, instruction, max_new_tokens=...) -> str``: a
            :class:`paco_reward.PacoReward` or a scoring backend (``TransformersBackend``,
            ``LocalBackend``). Images come first in the message, then the text (the Qwen
            route's order).
        name: the model's name in reports.
        max_new_tokens: answer length limit (512, the Qwen route's).

    Example:
        >>> rm = PacoReward.from_pretrained("Qwen/Qwen2.5-VL-7B-Instruct")  # doctest: +SKIP
        >>> InProcessChatJudge(rm, "Qwen2.5-VL-7B").chat([img], "Describe.")  # doctest: +SKIP
    """

    def __init__(self, model: Any, name: str, max_new_tokens: int = 512) -> None:
        backend = getattr(model, "backend", model)  # a PacoReward generates through its backend
        if not hasattr(backend, "generate"):
            raise InputError(
                f"{type(model).__name__} has no generate(); pass a PacoReward or a scoring "
                "backend (TransformersBackend, LocalBackend)."
            )
        self.backend = backend
        self.name = f"local:{name}"
        self.max_new_tokens = max_new_tokens

    def protocol(self) -> dict[str, Any]:
        """Model and decoding settings."""
        return {
            "kind": "in_process",
            "model": self.name,
            "max_new_tokens": self.max_new_tokens,
            "decoding": "greedy",
        }

    def chat(self, images: Sequence[Image.Image], text: str) -> str:
        """Greedy answer text; images are resized to the model's pixel budget first, as every
        in-process scoring call does (:func:`paco_reward.images.resize_for_model`)."""
        policy = getattr(self.backend, "image_policy", None)
        ready = [
            resize_for_model(load_image(img, f"image {k}"), policy, f"image {k}")
            for k, img in enumerate(images)
        ]
        return self.backend.generate(ready, text, max_new_tokens=self.max_new_tokens)
