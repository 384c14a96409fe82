"""Fixtures of the data pipeline tests: synthetic work folders and a local teacher server."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory):
    """A complete synthetic run (6 prompts x 4 grids of 2x2): (work_dir, stats)."""
    from data_pipeline.pipeline import SyntheticConfig, run_synthetic

    work = tmp_path_factory.mktemp("syn") / "work"
    stats = run_synthetic(work, SyntheticConfig(n_prompts=6, seed=1))
    return work, stats


@pytest.fixture
def pairs_work(tmp_path):
    """A synthetic work folder run up to stage 5 (pairs), small: 3 prompts, same-position
    instances; returns the folder."""
    from data_pipeline.generate import ingest_grids
    from data_pipeline.instances import PairingConfig, build_instances
    from data_pipeline.pairs import build_pairs
    from data_pipeline.pipeline import SyntheticConfig, make_synthetic_inputs, simulate_rankings
    from data_pipeline.prompts import prepare_prompts
    from data_pipeline.rankings import ingest_rankings

    work = tmp_path / "work"
    inputs = make_synthetic_inputs(work, SyntheticConfig(n_prompts=3, seed=2))
    prepare_prompts(inputs["prompts"], work, source="synthetic")
    ingest_grids(inputs["grids"], work)
    build_instances(work, PairingConfig(rule="same_position"))
    ingest_rankings(work, simulate_rankings(work))
    build_pairs(work)
    return work


class TeacherState:
    """What the local teacher does and what it saw."""

    def __init__(self, delay: float = 0.0, fail_first: int = 0, contradict_first: int = 0):
        self.delay = delay
        self.fail_first = fail_first  # HTTP 500 for the first n requests of each pair
        self.contradict_first = contradict_first  # wrong decision word for the first n
        self.requests: list[str] = []  # pair ids, in order of arrival
        self.answered: list[str] = []  # pair ids answered with HTTP 200
        self.lock = threading.Lock()
        self.inflight = 0
        self.max_inflight = 0


def _make_handler(state: TeacherState):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            pair_id = self.headers.get("X-Paco-Pair-Id", "?")
            text = next(
                p["text"] for p in body["messages"][-1]["content"] if p.get("type") == "text"
            )
            images = [p for p in body["messages"][-1]["content"] if p.get("type") == "image_url"]
            with state.lock:
                n = state.requests.count(pair_id)
                state.requests.append(pair_id)
                state.inflight += 1
                state.max_inflight = max(state.max_inflight, state.inflight)
            try:
                self._answer(body, pair_id, text, images, n)
            finally:
                with state.lock:
                    state.inflight -= 1

        def _answer(self, body, pair_id, text, images, n):
            time.sleep(state.delay)
            if n < state.fail_first:
                self.send_response(500)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": {"message": "overloaded"}}')
                return
            consistent = re.search(r"\bis NOT consistent\b", text) is None
            if n < state.fail_first + state.contradict_first:
                consistent = not consistent
            word = "Yes" if consistent else "No"
            detail = (
                "both images keep the same character and palette"
                if consistent
                else "the second image changes the character's colour and shape"
            )
            content = f"{word}. Looking at the {len(images)} images, {detail}."
            reply = {
                "id": "chatcmpl-local",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            with state.lock:
                state.answered.append(pair_id)

    return Handler


@pytest.fixture
def teacher_server():
    """Factory: ``teacher_server(delay=..., fail_first=..., contradict_first=...)`` starts a
    local OpenAI-compatible chat endpoint on 127.0.0.1 and returns (base_url, state).
    Its reasons depend on the label stated in the request."""
    servers = []

    def start(**kwargs):
        state = TeacherState(**kwargs)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1", state

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
