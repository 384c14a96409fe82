"""Remote scoring over the OpenAI chat-completions protocol (``vllm serve`` or ``paco-reward serve``).

Each pair becomes one chat request built by :func:`paco_reward.templates.build_messages`
(the two images as lossless PNG data URLs, then the instruction) with ``max_tokens=1`` and
``logprobs=True``. The score is computed on the client by
:func:`paco_reward.yes_no.yes_probability_from_logprobs`, the same extraction the
in-process backend's numbers reduce to.

Exact by default: the client asks for the log-probabilities of exactly the yes/no tokens
(``logprob_token_ids``, which ``paco-reward serve`` and vLLM accept), so no truncation to a
top-k happens. The ids come from ``yes_no_token_ids=``, a ``tokenizer=``, the server's
``/v1/models`` entry (``paco-reward serve`` advertises them) or the server's own tokenizer
(vLLM's ``/tokenize``, at the server root). A response that lacks any requested token (a
server that ignores the field answers 200 with its top-k) raises
:class:`~paco_reward.errors.LogprobTokenIdsIgnoredError`. With ``exact_yes_no=False`` the
client uses the top-k only, as a plain OpenAI server gives: a pair whose top-k holds no
yes/no variant scores NaN (with a warning and the ``missing_yes_no`` counter), never 0.0.

Images are resized on the client to the served model's own pixel budget (advertised by
``paco-reward serve``; for vLLM read from the image processor of the folder or hub id it
serves, ``/v1/models``' ``root``), so the server's processor leaves them as they are and
the model sees exactly what the in-process backend feeds it. A model without a pixel budget
(Gemma-3, whose processor resizes every image to a fixed square; ``paco-reward serve``
advertises ``"image_policy": null``) gets its images as they are: the server's processor
resizes them, as the in-process one does.

Several servers: ``base_url`` may be a list of replicas. Requests are spread round-robin;
a replica that fails at the transport level is marked down and the request goes to the
next one at once (a down replica is tried again after ``replica_cooldown`` seconds). Only
when every replica fails does the attempt count as failed for the retry policy.

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
import ssl
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import certifi
import httpx
import numpy as np
from PIL import Image

from paco_reward.errors import InputError, LogprobTokenIdsIgnoredError, RewardServerError
from paco_reward.images import ImagePolicy, image_hash, model_image_policy
from paco_reward.local_backend import PairRequest
from paco_reward.lru import LRUCache
from paco_reward.retry import RETRY_STATUS, RetryPolicy, TransientError, retry_after_seconds
from paco_reward.templates import build_messages
from paco_reward.yes_no import YesNoTokens, yes_no_words, yes_probability_from_logprobs

logger = logging.getLogger(__name__)


IMAGE_FORMATS = ("png", "jpeg")


# The gateway's codes for an upstream that does not answer (``paco_reward.server.gateway``):
# the fix is that upstream's server, not a longer wait here.
_UPSTREAM_DOWN_CODES = frozenset({"upstream_unreachable", "upstream_timeout", "upstream_error"})
_UPSTREAM_DOWN_ADVICE = (
    "The gateway answers but the server behind it for this model does not: start or fix that "
    "upstream (the gateway's /health, with its key, lists each upstream's state); more "
    "retries or a longer timeout here do not help."
)


def _error_code(response: httpx.Response) -> str | None:
    """The OpenAI error body's ``code``, or ``None``."""
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


class _Replica:
    """One server of a replica set: its API root and its health as last seen."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.root = self.url.removesuffix("/v1")  # vLLM serves /tokenize at the server root
        self.sent = 0
        self.failures = 0
        self.down_since: float | None = None  # monotonic time of the last transport failure


class RemoteBackend:
    """A :class:`~paco_reward.reward.ScoringBackend` that scores through an OpenAI-compatible
    chat-completions server.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``, or a list of replicas'
            API roots serving the same model (requests are spread over them).
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
        exact_yes_no: request the exact yes/no log-probabilities (default; raises
            :class:`LogprobTokenIdsIgnoredError` when the server ignores the request); False
            opts into the top-k only, as a plain OpenAI server gives (NaN when no yes/no
            token is in it).
        yes_no_token_ids: vocabulary ids whose exact log-probabilities to request through
            ``logprob_token_ids``. By default taken from ``tokenizer``, else the server's
            ``/v1/models`` entry (``paco-reward serve``), else the server's ``/tokenize``
            (vLLM).
        tokenizer: a tokenizer, or a local folder/hub id of the served model, to resolve
            those ids (a folder or id is also read for the image budget).
        image_policy: pixel budget images are resized to before sending; defaults to the
            server's advertised policy (``paco-reward serve``; ``null`` for a model without
            one), else the image processor of ``tokenizer`` (a folder/id) or of the served
            model's ``root`` (vLLM; none for a processor that resizes itself, as Gemma-3's),
            else Qwen2.5-VL's defaults with a warning.
        replica_cooldown: seconds a replica that failed is left out before it is tried again
            (it is tried at once when every replica is down).
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
        base_url: str | Sequence[str],
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
        replica_cooldown: float = 10.0,
        seed: int | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise InputError(
                f"base_url must be a server's API root or a non-empty list of them; got {base_url!r}."
            )
        if len({u.rstrip("/") for u in urls}) != len(urls):
            raise InputError(f"base_url lists a replica twice: {urls!r}.")
        if max_concurrency < 1:
            raise InputError(f"max_concurrency must be >= 1; got {max_concurrency}.")
        if timeout <= 0:
            raise InputError(f"timeout must be > 0 seconds; got {timeout}.")
        if not 0 <= top_logprobs <= 20:
            raise InputError(
                f"top_logprobs must be in [0, 20] (OpenAI's limit); got {top_logprobs}."
            )
        if image_format not in IMAGE_FORMATS:
            raise InputError(f"image_format must be one of {IMAGE_FORMATS}; got {image_format!r}.")
        self._replicas = [_Replica(url) for url in urls]
        self.base_url = self._replicas[0].url
        self.base_urls = [r.url for r in self._replicas]
        self._where = self.base_url if len(urls) == 1 else f"replicas {', '.join(self.base_urls)}"
        self.replica_cooldown = replica_cooldown
        self._next_replica = 0
        self._replica_of_last_answer = self._replicas[0]
        self.model = model
        self.name = f"remote:{model}"
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.retry_policy = RetryPolicy(retries, backoff, max_backoff, seed)
        self.retries = retries
        self.top_logprobs = top_logprobs
        self.image_format = image_format
        self.canonical_yes_no = canonical_yes_no
        self.cache: LRUCache[float] = LRUCache(max(0, cache_size))
        self.missing_yes_no = 0  # pairs scored NaN because no yes/no token was returned
        self.requests_sent = 0
        self.retries_done = 0
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
            logger.warning(
                "exact_yes_no=False: scores use the server's top-%d log-probabilities only; a "
                "pair without any yes/no token among them scores NaN (counted in "
                "missing_yes_no).",
                top_logprobs,
            )
        elif self.yes_no_token_ids is None:
            self.yes_no_token_ids = self._discover_yes_no_ids()
        if image_policy is None and "image_policy" in advertised:
            served = advertised["image_policy"]  # null: the server's processor resizes
            self.image_policy = ImagePolicy(**served) if served else None
        else:
            self.image_policy = image_policy or self._served_image_policy(entry, tokenizer)

    # ------------------------------------------------------------------ model check
    def _check_model(self) -> dict:
        """GET /models; fail fast when the server does not serve ``self.model``. With
        replicas: one must answer (with retries), each other is asked once and left out
        (marked down, with a warning) if it does not answer."""
        # A gateway lists a model whose upstream is down marked so: transient (it may come
        # back), retried with the rest, and the error says which upstream and why.
        entry = self._with_retries_sync(
            lambda: self._model_entry(
                self._send_sync("GET", "/models", None), self._replica_of_last_answer
            ),
            "/models",
        )
        answered = self._replica_of_last_answer
        for replica in self._replicas:
            if replica is answered:
                continue
            try:
                self._model_entry(self._send_sync("GET", "/models", None, only=replica), replica)
            except TransientError as err:
                logger.warning(
                    "Replica %s does not answer (%s); it is left out for now and retried "
                    "after %.0fs.",
                    replica.url,
                    err,
                    self.replica_cooldown,
                )
        return entry

    def _model_entry(self, body: dict, replica: _Replica) -> dict:
        try:
            entries = {entry["id"]: entry for entry in body["data"]}
        except (KeyError, TypeError) as err:
            raise RewardServerError(
                f"{replica.url}/models answered {str(body)[:200]!r}, not an OpenAI model list "
                f"({err!r}); is base_url the API root (ending in /v1)?"
            ) from None
        if self.model not in entries:
            raise RewardServerError(
                f"The reward server at {replica.url} does not serve model {self.model!r}; it "
                f"serves {sorted(entries)}. Pass model= one of those (or start the server with "
                "the model you meant)."
            )
        down = entries[self.model].get("paco_gateway")
        if isinstance(down, dict) and down.get("status") == "down":
            raise TransientError(
                f"the gateway at {replica.url} lists {self.model!r} but its upstream does not "
                f"answer ({down.get('code')}: {down.get('message')})",
                advice=_UPSTREAM_DOWN_ADVICE,
            )
        return entries[self.model]

    def _discover_yes_no_ids(self) -> list[int]:
        """The yes/no ids from the server's own tokenizer (vLLM's ``/tokenize`` and
        ``/detokenize`` at the server root), through the same rule as in-process."""
        root = self._replica_of_last_answer.root

        def call(path: str, payload: dict) -> dict:
            return self._with_retries_sync(
                lambda: self._send_sync("POST", path, payload, at_root=True), path
            )

        def encode(text: str) -> list[int]:
            body = call(
                "/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False}
            )
            return list(body["tokens"])

        def decode(ids) -> str:
            return call("/detokenize", {"model": self.model, "tokens": list(ids)})["prompt"]

        try:
            tokens = YesNoTokens.from_encoder(
                encode, decode, canonical=self.canonical_yes_no, name=f"The tokenizer at {root}"
            )
        except (RewardServerError, KeyError, TypeError) as err:
            raise RewardServerError(
                f"Cannot find the yes/no token ids of model {self.model!r} at {self._where}: "
                f"it does not advertise them and its /tokenize failed ({err}). Pass "
                "tokenizer=<the model's folder or id> or yes_no_token_ids=[...] for exact "
                "scores, or exact_yes_no=False to accept top-k truncated scores (NaN when no "
                "yes/no token is in the top-k)."
            ) from None
        logger.info("Yes/no token ids from %s/tokenize: %s", root, tokens)
        return [*tokens.yes, *tokens.no]

    def _served_image_policy(self, entry: dict, tokenizer: Any) -> ImagePolicy | None:
        """The served model's pixel budget: from ``tokenizer`` when it names a folder/id, else
        from the ``root`` the server reports (vLLM: the folder or hub id it loaded); ``None``
        when that image processor has none (it resizes every image itself)."""
        from transformers import AutoImageProcessor

        sources = []
        if isinstance(tokenizer, str) or hasattr(tokenizer, "__fspath__"):
            sources.append(str(tokenizer))
        if isinstance(entry.get("root"), str):
            sources.append(entry["root"])
        errors = []
        for source in sources:
            try:
                policy = model_image_policy(AutoImageProcessor.from_pretrained(source))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                errors.append(f"{source!r}: {type(err).__name__}: {str(err)[:120]}")
                continue
            if policy is None:
                logger.info(
                    "%s resizes images itself (its image processor from %s has no pixel "
                    "budget): they are sent as they are.",
                    self.model,
                    source,
                )
            else:
                logger.info("Image budget of %s from %s: %s", self.model, source, policy)
            return policy
        logger.warning(
            "Cannot read the image processor of model %r served at %s (%s); images are sent "
            "at Qwen2.5-VL's default pixel budget. If the served model's budget differs, the "
            "server resizes them again and scores differ from in-process: pass "
            "image_policy=ImagePolicy(min_pixels=..., max_pixels=...) or tokenizer=<a local "
            "copy of the model folder>.",
            self.model,
            self._where,
            "; ".join(errors) or "the server does not say which folder it serves",
        )
        return ImagePolicy()

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
        return {**self.cache.info(), "missing_yes_no": self.missing_yes_no}

    def replica_info(self) -> list[dict]:
        """Per replica: ``url``, requests ``sent``, transport ``failures`` and whether it is
        marked ``down`` now."""
        with self._stats_lock:
            return [
                {
                    "url": r.url,
                    "sent": r.sent,
                    "failures": r.failures,
                    "down": r.down_since is not None,
                }
                for r in self._replicas
            ]

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
                f"Reward server {self._where} (model {self.model!r}) returned no first-token "
                f"logprobs ({err!r}): {str(body)[:300]!r}. The server must support "
                "logprobs=True and top_logprobs."
            ) from None
        if self.yes_no_token_ids:
            # Every requested id is a distinct yes/no variant, so the variants that came back
            # must be at least as many; fewer means the server answered with its top-k.
            yes_words, no_words = yes_no_words(self.canonical_yes_no)
            present = sum(1 for token in logprobs if token in yes_words or token in no_words)
            if present < len(self.yes_no_token_ids):
                raise LogprobTokenIdsIgnoredError(
                    f"The reward server at {self._where} (model {self.model!r}) ignored "
                    f"logprob_token_ids: {len(self.yes_no_token_ids)} yes/no tokens were "
                    f"requested, {present} came back (it answered with "
                    f"{sorted(logprobs)[:8]}). Use a server that supports logprob_token_ids "
                    "(paco-reward serve, a recent vLLM), or pass exact_yes_no=False to accept "
                    "top-k truncated scores (NaN when no yes/no token is in the top-k)."
                )
        score = yes_probability_from_logprobs(logprobs, canonical_yes_no=self.canonical_yes_no)
        if math.isnan(score):
            self._count("missing_yes_no")
            logger.warning(
                "Pair %s: no yes/no token among the %d returned logprobs (%s); its score is NaN "
                "(missing_yes_no=%d). Drop exact_yes_no=False to get exact probabilities.",
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
                    f"Reward server {response.url} answered non-JSON: {response.text[:200]!r}"
                ) from None
        try:
            detail = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            detail = response.text[:300]
        if status in RETRY_STATUS:
            code = _error_code(response)
            raise TransientError(
                f"HTTP {status}: {detail}",
                retry_after=retry_after_seconds(response.headers),
                advice=_UPSTREAM_DOWN_ADVICE if code in _UPSTREAM_DOWN_CODES else None,
            )
        without_v1 = [r.url for r in self._replicas if not r.url.endswith("/v1")]
        if status == 404 and without_v1 and "model" not in detail.lower():
            # The usual mistake: the server's root instead of its API root (a bare 404).
            raise RewardServerError(
                f"The reward server answered {path} with HTTP 404 ({detail}) at "
                f"{response.url}: base_url {without_v1[0]!r} does not end in /v1; add /v1 "
                f"(base_url={without_v1[0] + '/v1'!r}: the API root of paco-reward serve "
                "and vLLM)."
            )
        if status == 404 and "model" in detail.lower():
            raise RewardServerError(
                f"The reward server at {self._where} does not serve model {self.model!r} "
                f"(HTTP 404: {detail})."
            )
        if status in (401, 403):
            raise RewardServerError(
                f"The reward server at {self._where} rejected the request (HTTP {status}: "
                f"{detail}); pass the server's key as api_key=."
            )
        raise RewardServerError(
            f"The reward server at {self._where} (model {self.model!r}) rejected {path} "
            f"with HTTP {status}: {detail}"
        )

    def _candidates(self, only: _Replica | None = None) -> list[_Replica]:
        """Replicas to try for one attempt, in order: the healthy ones round-robin, then the
        down ones whose cool-down is over; every replica when all are down (never refuse
        without trying)."""
        if only is not None:
            return [only]
        now = time.monotonic()
        with self._stats_lock:
            start = self._next_replica
            self._next_replica = (start + 1) % len(self._replicas)
            ring = self._replicas[start:] + self._replicas[:start]
            up = [r for r in ring if r.down_since is None]
            rested = sorted(
                (
                    r
                    for r in ring
                    if r.down_since is not None and now - r.down_since >= self.replica_cooldown
                ),
                key=lambda r: r.down_since,
            )
            if up or rested:
                return up + rested
            return sorted(ring, key=lambda r: r.down_since)

    def _sent(self, replica: _Replica) -> None:
        with self._stats_lock:
            self.requests_sent += 1
            replica.sent += 1

    def _answered(self, replica: _Replica) -> None:
        with self._stats_lock:
            if replica.down_since is not None:
                logger.info("Replica %s answers again.", replica.url)
            replica.down_since = None
        self._replica_of_last_answer = replica

    def _failed(self, replica: _Replica, err: Exception) -> str:
        with self._stats_lock:
            replica.failures += 1
            first = replica.down_since is None
            replica.down_since = time.monotonic()
        if first and len(self._replicas) > 1:
            logger.warning("Replica %s failed (%s); marked down.", replica.url, type(err).__name__)
        return f"{type(err).__name__}: {err}"

    def _url(self, replica: _Replica, path: str, at_root: bool) -> str:
        return (replica.root if at_root else replica.url) + path

    def _send_sync(
        self,
        method: str,
        path: str,
        payload: dict | None,
        *,
        at_root: bool = False,
        only: _Replica | None = None,
    ) -> dict:
        """One attempt: the request goes to the first replica that answers at the transport
        level; HTTP statuses are judged by :meth:`_raise_for_status`."""
        errors = []
        for replica in self._candidates(only):
            try:
                self._sent(replica)
                response = self._client.request(
                    method, self._url(replica, path, at_root), json=payload
                )
            except httpx.TransportError as err:
                errors.append(self._failed(replica, err))
                continue
            self._answered(replica)
            return self._raise_for_status(response, path)
        raise TransientError("; ".join(errors))

    async def _send_async(self, client: httpx.AsyncClient, path: str, payload: dict) -> dict:
        """:meth:`_send_sync` for a POST on an async client."""
        errors = []
        for replica in self._candidates():
            try:
                self._sent(replica)
                response = await client.post(self._url(replica, path, False), json=payload)
            except httpx.TransportError as err:
                errors.append(self._failed(replica, err))
                continue
            self._answered(replica)
            return self._raise_for_status(response, path)
        raise TransientError("; ".join(errors))

    def _exhausted(self, what: str, err: TransientError) -> RewardServerError:
        advice = err.advice or (
            "Check that the server is running and reachable, or raise retries=/timeout=."
        )
        return RewardServerError(
            f"The reward server at {self._where} (model {self.model!r}) failed {what} after "
            f"{self.retries + 1} attempts: {err}. {advice}"
        )

    def _on_retry(self, what: str):
        def log(attempt: int, err: BaseException, delay: float) -> None:
            self._count("retries_done")
            logger.warning("%s failed (%s); retry %d in %.2fs", what, err, attempt, delay)

        return log

    def _with_retries_sync(self, send, what: str) -> dict:
        """``send()`` under the retry policy (:mod:`paco_reward.retry`)."""
        try:
            for attempt in self.retry_policy.retrying(self._on_retry(what)):
                with attempt:
                    return send()
        except TransientError as err:
            raise self._exhausted(what, err) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _with_retries_async(
        self, client: httpx.AsyncClient, payload: dict, what: str
    ) -> dict:
        try:
            async for attempt in self.retry_policy.async_retrying(self._on_retry(what)):
                with attempt:
                    return await self._send_async(client, "/chat/completions", payload)
        except TransientError as err:
            raise self._exhausted(what, err) from None
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
            cached = self.cache.lookup(key)
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
                if math.isfinite(score):  # failed scores are never cached
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
                if math.isfinite(score):  # failed scores are never cached
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
                f"Reward server {self._where} returned no message content: {str(body)[:300]!r}"
            ) from None


def _yes_no_ids_from_tokenizer(tokenizer: Any, canonical: bool) -> list[int]:
    if isinstance(tokenizer, str) or hasattr(tokenizer, "__fspath__"):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    tokens = YesNoTokens.from_tokenizer(tokenizer, canonical=canonical)
    return [*tokens.yes, *tokens.no]
