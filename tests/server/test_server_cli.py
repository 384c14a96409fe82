"""``paco-reward serve`` argument parsing: safe defaults (loopback, no key unless given)."""

from __future__ import annotations

import argparse

import pytest

from paco_reward.server.cli import API_KEY_ENV, _is_loopback, register


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_serve_defaults_are_safe(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    args = parse(["serve", "model-dir"])
    assert (args.host, args.port, args.api_key, args.adapter) == ("127.0.0.1", 8000, None, None)
    assert args.max_batch_size == 32 and args.max_wait_ms == 5.0
    assert args.func.__name__ == "run_serve"


def test_serve_flags_and_key_from_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    args = parse(
        [
            "serve",
            "base",
            "--adapter",
            "lora",
            "--port",
            "9001",
            "--max-batch-size",
            "8",
            "--max-wait-ms",
            "2.5",
        ]
    )
    assert (args.model, args.adapter, args.port, args.api_key) == ("base", "lora", 9001, "from-env")
    assert (args.max_batch_size, args.max_wait_ms) == (8, 2.5)
    assert parse(["serve", "m", "--api-key", "flag"]).api_key == "flag"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
    ],
)
def test_loopback_detection(host, loopback):
    assert _is_loopback(host) is loopback
