"""The one retry policy of every client in the library (the remote scoring backend, the
reasons teacher): only transient failures are retried, with exponential back-off and
jitter, honouring a server's ``Retry-After``; built on ``tenacity``.

Transient: a connection error or timeout, and HTTP 408, 429 and 5xx. Everything else (a
401, a 404, a bug such as a ``TypeError``) fails at once: retrying cannot fix it.

    >>> policy = RetryPolicy(retries=3, backoff=0.5, max_backoff=8.0, seed=0)
    >>> policy.is_transient(TransientError("HTTP 503")), policy.is_transient(TypeError())
    (True, False)
    >>> for attempt in policy.retrying():       # doctest: +SKIP
    ...     with attempt:
    ...         send()
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import tenacity

from paco_reward.errors import ConfigError, PacoError, TransientError

__all__ = ["RETRY_STATUS", "RetryPolicy", "TransientError", "retry_after_seconds"]

logger = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def retry_after_seconds(headers) -> float | None:
    """A ``Retry-After`` header in seconds (``None`` when absent or a date)."""
    value = headers.get("retry-after") if headers is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@dataclass
class RetryPolicy:
    """Retries after the first attempt, and the back-off between them.

    Args:
        retries: retries after the first attempt (0 disables).
        backoff: first delay in seconds; doubles per retry up to ``max_backoff``, drawn
            uniformly from ``[delay / 2, delay]`` (jitter).
        max_backoff: the longest delay, also the most a ``Retry-After`` can ask for.
        seed: seeds the jitter (``None``: random).
    """

    retries: int = 5
    backoff: float = 0.5
    max_backoff: float = 8.0
    seed: int | None = None
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0; got {self.retries}.")
        if self.backoff < 0 or self.max_backoff < self.backoff:
            raise ConfigError(
                f"backoff must be >= 0 and max_backoff >= backoff; got {self.backoff}, "
                f"{self.max_backoff}."
            )
        self._rng = random.Random(self.seed)

    # ------------------------------------------------------------------ what to retry
    @staticmethod
    def is_transient(err: BaseException) -> bool:
        """Connection errors, timeouts, 408/429/5xx (httpx or openai), :class:`TransientError`."""
        if isinstance(err, TransientError):
            return True
        if isinstance(err, PacoError):  # the library's own verdict (e.g. a 4xx), not a blip
            return False
        import httpx

        if isinstance(err, (httpx.TransportError, TimeoutError, ConnectionError)):
            return True
        if isinstance(err, httpx.HTTPStatusError):
            return err.response.status_code in RETRY_STATUS
        try:
            import openai
        except ImportError:
            return False
        if isinstance(err, (openai.APIConnectionError, openai.APITimeoutError)):
            return True
        return isinstance(err, openai.APIStatusError) and err.status_code in RETRY_STATUS

    # ------------------------------------------------------------------ how long to wait
    def delay(self, attempt: int, err: BaseException | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        delay = self._rng.uniform(ceiling / 2, ceiling)
        hint = getattr(err, "retry_after", None)
        if hint is None:
            response = getattr(err, "response", None)
            hint = retry_after_seconds(getattr(response, "headers", None))
        if hint is not None:
            delay = max(delay, min(hint, self.max_backoff))
        return delay

    def _wait(self, state: tenacity.RetryCallState) -> float:
        return self.delay(state.attempt_number, state.outcome.exception())

    def _kwargs(self, retry_on, on_retry, attempts) -> dict:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            if on_retry is not None:
                on_retry(state.attempt_number, state.outcome.exception(), state.upcoming_sleep)

        return {
            "stop": tenacity.stop_after_attempt(attempts or self.retries + 1),
            "wait": self._wait,
            "retry": tenacity.retry_if_exception(retry_on or self.is_transient),
            "before_sleep": before_sleep,
            "reraise": True,
        }

    def retrying(
        self,
        on_retry: Callable[[int, BaseException, float], None] | None = None,
        retry_on: Callable[[BaseException], bool] | None = None,
        attempts: int | None = None,
    ) -> tenacity.Retrying:
        """A ``tenacity.Retrying`` with this policy; the last error is re-raised.

        Args:
            on_retry: called as ``(attempt, error, delay)`` before each wait.
            retry_on: which errors to retry (default :meth:`is_transient`).
            attempts: total attempts (default ``retries + 1``).
        """
        return tenacity.Retrying(**self._kwargs(retry_on, on_retry, attempts), sleep=_sleep)

    def async_retrying(
        self,
        on_retry: Callable[[int, BaseException, float], None] | None = None,
        retry_on: Callable[[BaseException], bool] | None = None,
        attempts: int | None = None,
    ) -> tenacity.AsyncRetrying:
        """The ``asyncio`` twin of :meth:`retrying`."""
        return tenacity.AsyncRetrying(**self._kwargs(retry_on, on_retry, attempts))


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)
