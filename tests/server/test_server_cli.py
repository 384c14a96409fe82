"""``paco-reward serve`` and ``paco-reward gateway`` argument parsing: safe defaults (loopback,
no key unless given), every server limit as a flag, several models with per-model options."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from paco_reward.cli import API_KEY_ENV, GatewayArguments, ServeArguments
from paco_reward.command_line import parse_config
from paco_reward.errors import ConfigError
from paco_reward.launch import is_loopback
from paco_reward.server.config import ServerConfig
from paco_reward.server.limits import uvicorn_options
from paco_reward.server.runner import free_port, wait_until_healthy


def parse(argv: list[str]) -> ServeArguments:
    return parse_config(ServeArguments, argv)


def test_serve_defaults_are_safe(monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    args = parse(["model-dir"])
    assert (args.host, args.port, args.api_key, args.adapter) == ("127.0.0.1", 8000, None, [])
    assert args.names() == ["model-dir"] and args.per_model("device") == [None]
    assert args.max_batch_size == 32 and args.max_wait_ms == 5.0
    assert args.server_config() == ServerConfig()


def test_serve_flags_and_key_from_environment(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    args = parse(["base", "--adapter", "lora", "--port", "9001", "--max-batch-size", "8",
                  "--max_wait_ms", "2.5", "--served-model-name", "judge"])  # fmt: skip
    assert (args.model, args.adapter, args.port, args.api_key) == (
        ["base"],
        ["lora"],
        9001,
        "from-env",
    )
    assert (args.max_batch_size, args.max_wait_ms) == (8, 2.5)
    assert args.names() == ["judge"] and args.server_config().served_model_name is None
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


def test_serve_several_models_each_with_its_options():
    args = parse(["base", "merged", "--served_model_name", "A", "B", "--device", "cuda:0",
                  "cuda:1", "--dtype", "bfloat16", "--adapter", "lora", "none"])  # fmt: skip
    assert args.names() == ["A", "B"]
    assert args.per_model("device") == ["cuda:0", "cuda:1"]
    assert args.per_model("dtype") == ["bfloat16", "bfloat16"]  # one value: every model's
    assert args.per_model("adapter") == ["lora", None]
    assert parse(["runs/x/merged", "runs/y/gemma"]).names() == ["merged", "gemma"]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["runs/x/merged", "runs/y/merged"], "two models would be served as the same name"),
        (["a", "b", "--served_model_name", "A"], "one non-empty name per MODEL"),
        (["a", "b", "--device", "cpu", "cpu", "cpu"], "--device takes one value for every model"),
        (["a", "--max_batch_size", "0"], "max_batch_size must be >= 1"),
    ],
)
def test_serve_refuses_arguments_that_do_not_add_up(argv, match):
    with pytest.raises(ConfigError, match=match):
        parse(argv)


def test_gateway_arguments(monkeypatch):
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    args = parse_config(GatewayArguments, ["A=http://127.0.0.1:8001/v1", "B=http://h:8002",
                                           "--port", "9000", "--upstream-timeout", "30"])  # fmt: skip
    roots = {name: up.api_root for name, up in args.upstream_urls().items()}
    assert roots == {"A": "http://127.0.0.1:8001/v1", "B": "http://h:8002/v1"}
    assert (args.host, args.port, args.upstream_timeout, args.api_key) == (
        "127.0.0.1",
        9000,
        30.0,
        "from-env",
    )
    for argv, match in (
        (["A"], "not NAME=URL"),
        (["A=http://x", "A=http://y"], "given twice"),
        (["A=http://x", "--connect_timeout", "0"], "connect_timeout must be > 0"),
    ):
        with pytest.raises(ConfigError, match=match):
            parse_config(GatewayArguments, argv)


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


def test_serve_a_pinned_revision_offline_from_a_hub_cache(two_revision_hub, monkeypatch,
                                                          random_images):  # fmt: skip
    """``paco-reward serve REPO --revision v1 --cache_dir CACHE`` (a child process, offline)
    serves v1's weights: its scores are v1's folder's, not main's."""
    from paco_reward import PacoReward
    from paco_reward.server import ServerProcess

    cache, repo, folders = two_revision_hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the child's environment: nothing to download
    a, b = random_images(2, (56, 56), seed=23)
    expected = {rev: PacoReward.from_pretrained(folder).score(a, b, "fox")
                for rev, folder in folders.items()}  # fmt: skip
    assert expected["v1"] != pytest.approx(expected["main"], abs=1e-4)
    flags = ["--revision", "v1", "--cache_dir", str(cache), "--served_model_name", "judge"]
    with ServerProcess(repo, args=flags) as server:
        served = PacoReward.from_server(server.base_url, model="judge").score(a, b, "fox")
    assert served == pytest.approx(expected["v1"], abs=1e-5)


def test_serve_keeps_a_request_log_only_when_asked(tiny_model_dir):
    """``paco-reward serve`` kept no request log; ``--access_log`` is uvicorn's access log
    (one line per request on stdout), off by default (a quiet server stays quiet)."""
    assert uvicorn_options(parse(["m"]).server_config())["access_log"] is False
    assert parse(["m", "--access_log"]).server_config().access_log is True
    port = free_port()
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "paco_reward.cli", "serve", str(tiny_model_dir),
               "--port", str(port), "--device", "cpu", "--access_log"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}/v1", timeout=120, process=process)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/v1/nothing").status_code == 404
    finally:
        process.terminate()
        out, err = process.communicate(timeout=60)
    assert '"GET /v1/models HTTP/1.1" 200' in out, (out, err)
    assert '"GET /v1/nothing HTTP/1.1" 404' in out, (out, err)
    assert "Uvicorn running" not in out + err  # uvicorn's own INFO lines stay off
