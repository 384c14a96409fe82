"""Shared pieces of the GEdit-Bench / VCReward-Bench tests: the fixture folders, a canned
judge that answers from ``tests/data/gedit_ref/canned.json``, and a real HTTP endpoint serving
any such judge (``chat_server``), for the command lines, which only reach a judge by URL."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

GEDIT_FIXTURE = Path(__file__).resolve().parents[1] / "data" / "gedit_ref"


class CannedJudge:
    """Answers the fixture's prompts from canned.json: the SC prompt is recognised by its
    instruction, the PQ prompt by the (resized, solid-colour) edit's colour. Counts calls."""

    name = "canned"

    def __init__(self, rows, root: Path, model: str = "tiny") -> None:
        from PIL import Image

        self.canned = json.loads((GEDIT_FIXTURE / "canned.json").read_text())
        self.by_instruction = {r.instruction: r.item_id for r in rows}
        self.by_colour = {}
        for r in rows:
            path = root / model / "fullset" / r.task_type / r.language / f"{r.key}.png"
            if path.is_file():
                self.by_colour[Image.open(path).convert("RGB").getpixel((0, 0))] = r.item_id
        self.calls = 0
        self.asked: list[str] = []

    def protocol(self) -> dict:
        return {"kind": "canned"}

    def chat(self, images, text: str) -> str:
        self.calls += 1
        self.asked.append(text)
        if "Editing instruction:" in text:
            instruction = text.rsplit("Editing instruction: ", 1)[1][:-1]
            return self.canned[f"{self.by_instruction[instruction]}|SC"]
        return self.canned[f"{self.by_colour[images[-1].convert('RGB').getpixel((0, 0))]}|PQ"]


@pytest.fixture
def gedit_fixture() -> Path:
    return GEDIT_FIXTURE


class ChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint on 127.0.0.1 (stdlib HTTP, a
    thread) whose answer is ``answer(images, text)``: the request's images decoded from their
    data URLs, in order, and its text parts joined. ``requests`` counts the calls it got."""

    def __init__(self, answer: Callable[[list, str], str]) -> None:
        from PIL import Image

        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                images, texts = [], []
                for message in body["messages"]:
                    content = message["content"]
                    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
                    for part in parts:
                        if part["type"] == "image_url":
                            data = part["image_url"]["url"].split(",", 1)[1]
                            images.append(Image.open(io.BytesIO(base64.b64decode(data))))
                        elif message["role"] == "user":
                            texts.append(part["text"])
                server.requests += 1
                text = answer(images, "".join(texts))
                out = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out.encode())

            def log_message(self, *args) -> None:  # keep the test output quiet
                pass

        self.requests = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def chat_server() -> Iterator[Callable[[Callable[[list, str], str]], ChatServer]]:
    """``chat_server(answer)`` starts a :class:`ChatServer`; all are stopped after the test."""
    started: list[ChatServer] = []

    def start(answer: Callable[[list, str], str]) -> ChatServer:
        started.append(ChatServer(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()
