"""One backend, many callers: threads scoring one in-process backend at once get the scores
they get one at a time (the entry points take the backend's lock; the processor's tokenizer
is used under its own), and ``close()`` / a ``with`` block stops the preprocessing worker
thread, after which a call is refused; the same for ``PacoReward`` and a remote client."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from paco_reward import PacoReward, UsageError


@pytest.fixture(params=["tiny_model_dir", "tiny_gemma3_dir"], ids=["local", "processor"])
def judge_dir(request):
    """A Qwen2.5-VL judge (LocalBackend) and a Gemma-3 one (ProcessorBackend)."""
    return request.getfixturevalue(request.param)


def _workloads(random_images) -> list[list[tuple]]:
    images = random_images(6, size=(48, 40), seed=11)
    themes = ["a fox", "a red fox in the snow", "two cats", "a blue bird in the sky"]
    return [
        [(images[(k + i) % 6], images[(k + i + 1) % 6], themes[(k + i) % 4]) for i in range(4)]
        for k in range(8)
    ]


def test_concurrent_callers_get_the_serial_scores(judge_dir, random_images):
    workloads = _workloads(random_images)
    with PacoReward.from_pretrained(judge_dir, batch_size=2) as rm:
        serial = [rm.score_pairs(pairs) for pairs in workloads]
        explained = rm.backend.generate(
            [workloads[0][0][0], workloads[0][0][1]], "Is it a fox?", max_new_tokens=3
        )
        threaded: dict[int, np.ndarray] = {}
        texts: list[str] = []
        errors: list[BaseException] = []
        start = threading.Barrier(len(workloads) + 1)

        def score(k: int) -> None:
            start.wait()
            try:
                for _ in range(3):
                    threaded[k] = rm.score_pairs(workloads[k])
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        def explain() -> None:
            start.wait()
            a, b = workloads[0][0][:2]
            texts.append(rm.backend.generate([a, b], "Is it a fox?", max_new_tokens=3))

        threads = [threading.Thread(target=score, args=(k,)) for k in range(len(workloads))]
        threads.append(threading.Thread(target=explain))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not errors, errors
        for k, expected in enumerate(serial):
            np.testing.assert_array_equal(threaded[k], expected)
        assert texts == [explained]


def _workers(rm: PacoReward) -> list[threading.Thread]:
    worker = rm.backend._worker
    return list(worker._threads) if worker is not None else []


def test_close_stops_the_worker_thread_and_refuses_later_calls(judge_dir, random_images):
    a, b = random_images(2, seed=2)
    rm = PacoReward.from_pretrained(judge_dir)
    rm.score(a, b, "a fox")
    workers = _workers(rm)
    assert workers and all(t.is_alive() for t in workers)
    assert all(t.name.startswith("paco-preprocess") for t in workers)
    rm.close()
    assert not any(t.is_alive() for t in workers)
    rm.close()  # idempotent
    with pytest.raises(UsageError, match="is closed"):
        rm.score(a, b, "a fox")
    with pytest.raises(UsageError, match="is closed"):
        rm.backend.generate([a, b], "x", max_new_tokens=1)


def test_a_with_block_closes_in_process_and_remote_backends(tiny_model_dir, random_images):
    from paco_reward.server import ServerConfig, ServerThread, create_app

    a, b = random_images(2, seed=4)
    with PacoReward.from_pretrained(tiny_model_dir) as rm:
        local = rm.score(a, b, "a fox")
        workers = _workers(rm)
        app = create_app(rm.backend, ServerConfig("judge"))
        with (
            ServerThread(app) as server,
            PacoReward.from_server(server.base_url, "judge") as remote,
        ):
            assert remote.score(a, b, "a fox") == pytest.approx(local, abs=1e-4)
        assert remote.backend._client.is_closed
    assert workers and not any(t.is_alive() for t in workers)
