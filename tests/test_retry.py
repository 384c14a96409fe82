"""The one retry policy: only transient failures are retried, with back-off honouring
Retry-After; the remote client and the reasons teacher both follow it."""

from __future__ import annotations

import httpx
import pytest

from paco_reward.errors import RewardServerError
from paco_reward.retry import RetryPolicy, TransientError


def _status_error(status: int, headers: dict | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, headers=headers or {}, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (httpx.ConnectError("refused"), True),
        (httpx.ReadTimeout("slow"), True),
        (_status_error(503), True),
        (_status_error(429), True),
        (_status_error(408), True),
        (_status_error(401), False),
        (_status_error(404), False),
        (TypeError("bug"), False),
        (RewardServerError("HTTP 400: bad image"), False),
        (TransientError("HTTP 502"), True),
    ],
)
def test_only_transient_failures_are_retried(error, transient):
    assert RetryPolicy.is_transient(error) is transient


def test_openai_errors_are_classified_by_status():
    import openai

    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")

    def api_error(status):
        response = httpx.Response(status, request=request)
        return openai.APIStatusError("x", response=response, body=None)

    assert RetryPolicy.is_transient(api_error(500)) and RetryPolicy.is_transient(api_error(429))
    assert not RetryPolicy.is_transient(api_error(401))
    assert RetryPolicy.is_transient(openai.APIConnectionError(request=request))


def test_backoff_doubles_with_jitter_and_honours_retry_after():
    policy = RetryPolicy(retries=5, backoff=0.5, max_backoff=4.0, seed=0)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 4.0)]:
        assert ceiling / 2 <= policy.delay(attempt) <= ceiling
    assert policy.delay(1, TransientError("503", retry_after=3.0)) == 3.0
    assert policy.delay(1, _status_error(503, {"retry-after": "2"})) == 2.0
    assert policy.delay(1, TransientError("503", retry_after=60.0)) == 4.0  # capped


def test_retrying_stops_at_the_attempt_budget_and_reraises():
    calls = []

    def flaky():
        calls.append(1)
        raise TransientError("HTTP 503")

    with pytest.raises(TransientError):
        for attempt in RetryPolicy(retries=2, backoff=0.0, max_backoff=0.0).retrying():
            with attempt:
                flaky()
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(TypeError):
        for attempt in RetryPolicy(retries=2, backoff=0.0, max_backoff=0.0).retrying():
            with attempt:
                calls.append(1)
                raise TypeError("a bug is not retried")
    assert len(calls) == 1


class _Teacher:
    name = "fake"

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def areason(self, pair, image_a, image_b) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "Yes. Same shape and colour." if pair["label"] else "No. Different colour."


def _pair(k: int) -> dict:
    return {"pair_id": f"p{k}", "label": 1, "prompt": "", "image_a": "a", "image_b": "b"}


def test_reasons_teacher_retries_transient_errors_only(tmp_path):
    from data_pipeline.reasons import annotate_reasons

    teacher = _Teacher([_status_error(503), httpx.ConnectError("refused")])
    stats = annotate_reasons([_pair(0)], teacher, tmp_path / "r.jsonl", load_images=False,
                             backoff_s=0.0, max_backoff_s=0.0, progress=False)  # fmt: skip
    assert (stats.done, stats.errors, teacher.calls) == (1, 2, 3)

    teacher = _Teacher([_status_error(401)])
    with pytest.raises(httpx.HTTPStatusError):
        annotate_reasons([_pair(1)], teacher, tmp_path / "s.jsonl", load_images=False,
                         backoff_s=0.0, max_backoff_s=0.0, progress=False)  # fmt: skip
    assert teacher.calls == 1  # a wrong key is not asked again
