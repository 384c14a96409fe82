"""``paco-reward serve`` argument parsing: safe defaults (loopback, no key unless given), and
every server limit as a flag."""

from __future__ import annotations

import dataclasses

import pytest

from paco_reward.command_line import parse_config
from paco_reward.launch import is_loopback
from paco_reward.server.cli import API_KEY_ENV, ServeArguments
from paco_reward.server.config import ServerConfig


def parse(argv: list[str]) -> ServeArguments:
    return parse_config(ServeArguments, argv)


def test_serve_defaults_are_safe(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    args = parse(["model-dir"])
    assert (args.host, args.port, args.api_key, args.adapter) == ("127.0.0.1", 8000, None, None)
    assert args.max_batch_size == 32 and args.max_wait_ms == 5.0
    assert args.server_config() == ServerConfig()


def test_serve_flags_and_key_from_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    args = parse(["base", "--adapter", "lora", "--port", "9001", "--max-batch-size", "8",
                  "--max_wait_ms", "2.5", "--served-model-name", "judge"])  # fmt: skip
    assert (args.model, args.adapter, args.port, args.api_key) == ("base", "lora", 9001, "from-env")
    assert (args.max_batch_size, args.max_wait_ms) == (8, 2.5)
    assert args.server_config().served_model_name == "judge"
    assert parse(["m", "--api-key", "flag"]).api_key == "flag"


def test_every_server_limit_is_a_flag():
    limits = [f for f in dataclasses.fields(ServerConfig)]
    argv = ["m"]
    for f in limits:
        if f.type in ("int", "float"):
            argv += [f"--{f.name}", "7"]
    config = parse(argv).server_config()
    for f in limits:
        if f.type in ("int", "float"):
            assert getattr(config, f.name) == 7, f.name
    assert len([f for f in limits if f.type in ("int", "float")]) >= 11


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
    assert is_loopback(host) is loopback
