"""Remote scoring over the OpenAI chat-completions protocol (``vllm serve`` or ``paco-reward serve``).

Each pair becomes one chat request built by :func:`paco_reward.templates.build_messages`
(the two images as lossless PNG data URLs, then the instruction) with ``max_tokens=1``,
``logprobs=True`` and ``top_logprobs=20``. The score is computed on the client by
:func:`paco_reward.yes_no.yes_probability_from_logprobs`, the same extraction the
in-process backend's numbers reduce to.

Exact probabilities: when the server accepts ``logprob_token_ids`` (``paco-reward serve``
advertises its yes/no ids in ``/v1/models``; vLLM accepts the field since 2026 and the ids
can be given with ``yes_no_token_ids=`` or ``tokenizer=``), the client asks for the
log-probabilities of exactly the yes/no tokens, so no truncation to the top-k happens.
Otherwise, a pair whose top-k holds no yes/no variant scores NaN (with a warning and the
``missing_yes_no`` counter), never 0.0.

Failure policy: connection errors, timeouts, 408, 429 and 5xx are retried with exponential
back-off and jitter (``Retry-After`` honoured); other 4xx fail at once; exhausting the
retries raises :class:`~paco_reward.errors.RewardServerError`. A call never returns a
score it did not receive.

    >>> from paco_reward import PacoReward
    >>> rm = PacoReward.from_server("http://127.0.0.1:8000/v1", model="PaCo-Reward-7B")  # doctest: +SKIP
    >>> rm.score("a.png", "b.png", "a red fox")                                          # doctest: +SKIP
    0.93
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import math
import random
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import certifi
import httpx
import numpy as np
from PIL import Image

from paco_reward.errors import RewardServerError
from paco_reward.images import ImagePolicy, image_hash
from paco_reward.templates import build_messages
from paco_reward.yes_no import YesNoTokens, yes_probability_from_logprobs

logger = logging.getLogger(__name__)

# (index of first image, index of second image, instruction text)
PairRequest = tuple[int, int, str]

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
IMAGE_FORMATS = ("png", "jpeg")


class _ScoreCache:
    """A thread-safe LRU map ``key -> score`` with hit/miss counters (size 0 disables it)."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[tuple, float] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> float | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key: tuple, value: float) -> None:
        if self.max_size <= 0 or not math.isfinite(value):
            return  # failed scores are never cached
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_size:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class _RetryableError(Exception):
    """A transient failure (connection error, 429, 5xx); ``retry_after`` is the server's hint."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RemoteBackend:
    """A :class:`~paco_reward.reward.ScoringBackend` that scores through an OpenAI-compatible
    chat-completions server.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        model: the served model name (checked against ``/v1/models`` at construction).
        api_key: sent as ``Authorization: Bearer ...`` when given.
        max_concurrency: requests in flight at once per call.
        timeout: seconds per request (connect, read and write).
        retries: retries after the first attempt on transient failures (0 disables).
        backoff: first back-off delay in seconds; doubles per retry up to ``max_backoff``,
            each delay drawn uniformly from [delay / 2, delay] (jitter).
        cache_size: LRU entries keyed by (image hashes, instruction, model); 0 disables.
        top_logprobs: top-k log-probabilities requested per pair (OpenAI allows up to 20).
        image_format: ``"png"`` (lossless, default) or ``"jpeg"`` (smaller, lossy).
        canonical_yes_no: sum every case/space variant of Yes/No (default) or only "Yes"/"No".
        exact_yes_no: request the exact yes/no log-probabilities when the ids are known
            (default); False uses the top-k only, as a plain OpenAI server gives.
        yes_no_token_ids: vocabulary ids whose exact log-probabilities to request through
            ``logprob_token_ids`` (vLLM >= 2026 and ``paco-reward serve``). Taken from the
            server's ``/v1/models`` entry when it advertises them.
        tokenizer: alternatively a tokenizer (or its folder/id) to resolve those ids.
        image_policy: pixel budget images are resized to before sending; defaults to the
            server's advertised policy, else Qwen2.5-VL's defaults (vLLM's too).
        seed: seed of the jitter generator.

    Raises:
        RewardServerError: the server is unreachable after the retries, or does not serve
            ``model`` (the message lists the names it serves).

    Example:
        >>> backend = RemoteBackend("http://127.0.0.1:8000/v1", "tiny")  # doctest: +SKIP
        >>> backend.score_batch([img_a, img_b], [(0, 1, instruction)])    # doctest: +SKIP
        array([0.42])
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout: float = 60.0,
        retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        cache_size: int = 4096,
        top_logprobs: int = 20,
        image_format: str = "png",
        canonical_yes_no: bool = True,
        exact_yes_no: bool = True,
        yes_no_token_ids: Sequence[int] | None = None,
        tokenizer: Any = None,
        image_policy: ImagePolicy | None = None,
        seed: int | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1; got {max_concurrency}.")
        if retries < 0:
            raise ValueError(f"retries must be >= 0; got {retries}.")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds; got {timeout}.")
        if not 0 <= top_logprobs <= 20:
            raise ValueError(
                f"top_logprobs must be in [0, 20] (OpenAI's limit); got {top_logprobs}."
            )
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {IMAGE_FORMATS}; got {image_format!r}.")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"remote:{model}"
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.top_logprobs = top_logprobs
        self.image_format = image_format
        self.canonical_yes_no = canonical_yes_no
        self.cache = _ScoreCache(cache_size)
        self.missing_yes_no = 0  # pairs scored NaN because no yes/no token was returned
        self.requests_sent = 0
        self.retries_done = 0
        self._rng = random.Random(seed)
        self._stats_lock = threading.Lock()
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # One TLS context for every client: building one costs ~20 ms (certifi's bundle).
        self._ssl_context = ssl.create_default_context(cafile=certifi.where())
        self._client = httpx.Client(
            timeout=timeout,
            headers=self._headers,
            limits=httpx.Limits(max_connections=max_concurrency),
            verify=self._ssl_context,
        )
        if tokenizer is not None and yes_no_token_ids is None:
            yes_no_token_ids = _yes_no_ids_from_tokenizer(tokenizer, canonical_yes_no)
        self.yes_no_token_ids = list(yes_no_token_ids) if yes_no_token_ids else None
        entry = self._check_model()
        advertised = entry.get("paco") or {}
        if self.yes_no_token_ids is None and advertised.get("yes_no_token_ids"):
            key = "canonical" if canonical_yes_no else "exact"
            self.yes_no_token_ids = list(advertised["yes_no_token_ids"][key])
        if not exact_yes_no:
            self.yes_no_token_ids = None
        if image_policy is None and advertised.get("image_policy"):
            image_policy = ImagePolicy(**advertised["image_policy"])
        self.image_policy = image_policy or ImagePolicy()

    # ------------------------------------------------------------------ model check
    def _check_model(self) -> dict:
        """GET /models; fail fast when the server does not serve ``self.model``."""
        body = self._with_retries_sync(lambda: self._send_sync("GET", "/models", None), "/models")
        try:
            entries = {entry["id"]: entry for entry in body["data"]}
        except (KeyError, TypeError) as err:
            raise RewardServerError(
                f"{self.base_url}/models answered {str(body)[:200]!r}, not an OpenAI model list "
                f"({err!r}); is base_url the API root (ending in /v1)?"
            ) from None
        if self.model not in entries:
            raise RewardServerError(
                f"The reward server at {self.base_url} does not serve model {self.model!r}; it "
                f"serves {sorted(entries)}. Pass model= one of those (or start the server with "
                "the model you meant)."
            )
        return entries[self.model]

    def _count(self, counter: str) -> None:
        with self._stats_lock:
            setattr(self, counter, getattr(self, counter) + 1)

    def close(self) -> None:
        """Close the HTTP connection pool (also done when the backend is garbage-collected)."""
        self._client.close()

    def __enter__(self) -> RemoteBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def cache_info(self) -> dict[str, int]:
        """Cache and failure counters: hits, misses, size, max_size, missing_yes_no."""
        return {
            "hits": self.cache.hits,
            "misses": self.cache.misses,
            "size": len(self.cache),
            "max_size": self.cache.max_size,
            "missing_yes_no": self.missing_yes_no,
        }

    # ------------------------------------------------------------------ payloads
    def _data_url(self, image: Image.Image) -> str:
        buffer = io.BytesIO()
        if self.image_format == "png":
            image.save(buffer, format="PNG", compress_level=1)  # lossless; fast
        else:
            image.save(buffer, format="JPEG", quality=95)
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        return f"data:image/{self.image_format};base64,{encoded}"

    def _messages(self, urls: Sequence[str], instruction: str) -> list[dict]:
        messages = build_messages(instruction, num_images=len(urls))
        parts = iter(urls)
        for k, part in enumerate(messages[0]["content"]):
            if part["type"] == "image":
                messages[0]["content"][k] = {"type": "image_url", "image_url": {"url": next(parts)}}
        return messages

    def _score_payload(self, urls: Sequence[str], instruction: str) -> dict:
        payload = {
            "model": self.model,
            "messages": self._messages(urls, instruction),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": self.top_logprobs,
        }
        if self.yes_no_token_ids:
            payload["logprob_token_ids"] = self.yes_no_token_ids
        return payload

    def _score_from_response(self, body: dict, pair: PairRequest) -> float:
        try:
            first = body["choices"][0]["logprobs"]["content"][0]
            logprobs = {entry["token"]: float(entry["logprob"]) for entry in first["top_logprobs"]}
            logprobs.setdefault(first["token"], float(first["logprob"]))
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise RewardServerError(
                f"Reward server {self.base_url} (model {self.model!r}) returned no first-token "
                f"logprobs ({err!r}): {str(body)[:300]!r}. The server must support "
                "logprobs=True and top_logprobs."
            ) from None
        score = yes_probability_from_logprobs(logprobs, canonical_yes_no=self.canonical_yes_no)
        if math.isnan(score):
            self._count("missing_yes_no")
            logger.warning(
                "Pair %s: no yes/no token among the %d returned logprobs (%s); its score is NaN "
                "(missing_yes_no=%d). Serve with logprob_token_ids support (paco-reward serve, "
                "vLLM >= 2026) and pass yes_no_token_ids= to get exact probabilities.",
                pair[:2],
                len(logprobs),
                sorted(logprobs)[:5],
                self.missing_yes_no,
            )
        return score

    # ------------------------------------------------------------------ transport
    def _raise_for_status(self, response: httpx.Response, path: str) -> dict:
        status = response.status_code
        if status < 400:
            try:
                return response.json()
            except ValueError:
                raise RewardServerError(
                    f"Reward server {self.base_url}{path} answered non-JSON: {response.text[:200]!r}"
                ) from None
        try:
            detail = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            detail = response.text[:300]
        if status in RETRY_STATUS:
            retry_after = response.headers.get("retry-after")
            try:
                hint = float(retry_after) if retry_after is not None else None
            except ValueError:
                hint = None
            raise _RetryableError(f"HTTP {status}: {detail}", retry_after=hint)
        if status == 404 and "model" in detail.lower():
            raise RewardServerError(
                f"The reward server at {self.base_url} does not serve model {self.model!r} "
                f"(HTTP 404: {detail})."
            )
        if status in (401, 403):
            raise RewardServerError(
                f"The reward server at {self.base_url} rejected the request (HTTP {status}: "
                f"{detail}); pass the server's key as api_key=."
            )
        raise RewardServerError(
            f"The reward server at {self.base_url} (model {self.model!r}) rejected {path} "
            f"with HTTP {status}: {detail}"
        )

    def _send_sync(self, method: str, path: str, payload: dict | None) -> dict:
        try:
            self._count("requests_sent")
            response = self._client.request(method, self.base_url + path, json=payload)
        except httpx.TransportError as err:
            raise _RetryableError(f"{type(err).__name__}: {err}") from None
        return self._raise_for_status(response, path)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff, self.backoff * 2**attempt)
        delay = self._rng.uniform(delay / 2, delay)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff))
        return delay

    def _exhausted(self, what: str, err: _RetryableError) -> RewardServerError:
        return RewardServerError(
            f"The reward server at {self.base_url} (model {self.model!r}) failed {what} after "
            f"{self.retries + 1} attempts: {err}. Check that the server is running and reachable, "
            "or raise retries=/timeout=."
        )

    def _with_retries_sync(self, send, what: str) -> dict:
        for attempt in range(self.retries + 1):
            try:
                return send()
            except _RetryableError as err:
                if attempt == self.retries:
                    raise self._exhausted(what, err) from None
                delay = self._delay(attempt, err.retry_after)
                self._count("retries_done")
                logger.warning("%s failed (%s); retry %d in %.2fs", what, err, attempt + 1, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _with_retries_async(
        self, client: httpx.AsyncClient, payload: dict, what: str
    ) -> dict:
        for attempt in range(self.retries + 1):
            try:
                try:
                    self._count("requests_sent")
                    response = await client.post(self.base_url + "/chat/completions", json=payload)
                except httpx.TransportError as err:
                    raise _RetryableError(f"{type(err).__name__}: {err}") from None
                return self._raise_for_status(response, "/chat/completions")
            except _RetryableError as err:
                if attempt == self.retries:
                    raise self._exhausted(what, err) from None
                delay = self._delay(attempt, err.retry_after)
                self._count("retries_done")
                logger.warning("%s failed (%s); retry %d in %.2fs", what, err, attempt + 1, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ scoring
    def _plan(
        self, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
    ) -> tuple[np.ndarray, list[tuple[list[int], tuple, dict]]]:
        """Scores found in the cache, and (positions, cache key, payload) for the rest; a pair
        repeated within the call is requested once."""
        hashes: dict[int, str] = {}
        urls: dict[int, str] = {}
        scores = np.full(len(pairs), np.nan, dtype=np.float64)
        todo: dict[tuple, tuple[list[int], tuple, dict]] = {}
        for position, (a, b, instruction) in enumerate(pairs):
            for index in (a, b):
                if index not in hashes:
                    hashes[index] = image_hash(images[index])
            key = (hashes[a], hashes[b], instruction, self.model)
            if key in todo:
                todo[key][0].append(position)
                continue
            cached = self.cache.get(key)
            if cached is not None:
                scores[position] = cached
                continue
            for index in (a, b):
                if index not in urls:
                    urls[index] = self._data_url(images[index])
            todo[key] = ([position], key, self._score_payload([urls[a], urls[b]], instruction))
        return scores, list(todo.values())

    def score_batch(
        self, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
    ) -> np.ndarray:
        """Scores of ``pairs`` (indices into ``images``), one request per distinct uncached
        pair, ``max_concurrency`` in flight. Raises :class:`RewardServerError` if any request
        fails for good; no partial result is returned."""
        scores, todo = self._plan(images, pairs)
        if not todo:
            return scores

        def one(item: tuple[list[int], tuple, dict]) -> tuple[list[int], tuple, float]:
            positions, key, payload = item
            body = self._with_retries_sync(
                lambda: self._send_sync("POST", "/chat/completions", payload),
                f"pair {positions[0]}",
            )
            return positions, key, self._score_from_response(body, pairs[positions[0]])

        pool = ThreadPoolExecutor(min(self.max_concurrency, len(todo)))
        try:
            for future in as_completed([pool.submit(one, item) for item in todo]):
                positions, key, score = future.result()
                scores[positions] = score
                self.cache.put(key, score)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # on failure, queued pairs are dropped
        return scores

    async def ascore_batch(
        self, images: Sequence[Image.Image], pairs: Sequence[PairRequest]
    ) -> np.ndarray:
        """Async :meth:`score_batch` (one ``httpx.AsyncClient`` per call, so it works from
        any event loop). On a failure the other requests are cancelled and the error raised."""
        scores, todo = self._plan(images, pairs)
        if not todo:
            return scores
        semaphore = asyncio.Semaphore(self.max_concurrency)
        limits = httpx.Limits(max_connections=self.max_concurrency)
        async with httpx.AsyncClient(
            timeout=self.timeout, headers=self._headers, limits=limits, verify=self._ssl_context
        ) as client:

            async def one(positions: list[int], key: tuple, payload: dict) -> None:
                async with semaphore:
                    body = await self._with_retries_async(client, payload, f"pair {positions[0]}")
                score = self._score_from_response(body, pairs[positions[0]])
                scores[positions] = score
                self.cache.put(key, score)

            tasks = [asyncio.ensure_future(one(*item)) for item in todo]
            try:
                done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
        return scores

    def generate(
        self,
        images: Sequence[Image.Image],
        instruction: str,
        max_new_tokens: int = 256,
        **kwargs,
    ) -> str:
        """Greedy (``temperature=0``) judgement text for one pair; ``kwargs`` are extra
        request fields (e.g. ``temperature=0.7``)."""
        payload = {
            "model": self.model,
            "messages": self._messages([self._data_url(img) for img in images], instruction),
            "max_tokens": max_new_tokens,
            "temperature": 0.0,
            **kwargs,
        }
        body = self._with_retries_sync(
            lambda: self._send_sync("POST", "/chat/completions", payload), "generate"
        )
        try:
            return body["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise RewardServerError(
                f"Reward server {self.base_url} returned no message content: {str(body)[:300]!r}"
            ) from None


def _yes_no_ids_from_tokenizer(tokenizer: Any, canonical: bool) -> list[int]:
    if isinstance(tokenizer, str) or hasattr(tokenizer, "__fspath__"):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    tokens = YesNoTokens.from_tokenizer(tokenizer, canonical=canonical)
    return [*tokens.yes, *tokens.no]
