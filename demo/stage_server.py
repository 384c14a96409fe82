"""Stage: serve the evaluator over HTTP on loopback, score through ``PacoReward.from_server``,
check the scores equal in-process scoring, spread requests over two replicas (one killed
mid-way), and compare throughputs.

The server is ``paco-reward serve`` in a child process (as deployed: its own interpreter),
bound to 127.0.0.1 on a free port, and stopped at the end."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np

from benchmarks.server_throughput import make_pairs, measure_in_process, measure_server
from demo.context import DemoContext, print_table
from paco_reward import PacoReward
from paco_reward.local_backend import LocalBackend
from paco_reward.server import ServerProcess

CLIENTS = 32
SECONDS = 4.0


def _load_backend(model: Path, batch_size: int) -> LocalBackend:
    """A merged model folder, or a LoRA adapter folder on top of its base model."""
    adapter_config = Path(model) / "adapter_config.json"
    if adapter_config.is_file():
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        return LocalBackend.from_pretrained(base, adapter=model, batch_size=batch_size)
    return LocalBackend.from_pretrained(model, batch_size=batch_size)


def _server_for(model: Path) -> ServerProcess:
    flags = ["--served-model-name", "paco-demo", "--max-batch-size", "32", "--max-wait-ms", "5"]
    adapter_config = Path(model) / "adapter_config.json"
    if adapter_config.is_file():
        base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
        return ServerProcess(base, args=[*flags, "--adapter", str(model)])
    return ServerProcess(model, args=flags)


def run(ctx: DemoContext) -> None:
    model = ctx.artifacts.get("trained_evaluator") or ctx.artifacts["untrained_evaluator"]
    which = "trained" if ctx.artifacts.get("trained_evaluator") else "untrained"
    local = PacoReward(_load_backend(model, batch_size=32))
    pairs = make_pairs(48, size=64, seed=ctx.seed)

    with _server_for(model) as server:  # 127.0.0.1, a free port; stopped on exit
        print(f"serving the {which} evaluator {model} at {server.base_url}")
        remote = PacoReward.from_server(server.base_url, "paco-demo")
        remote_scores = remote.score_pairs(pairs[:8])
        local_scores = local.score_pairs(pairs[:8])
        gap = float(np.max(np.abs(remote_scores - local_scores)))
        print_table(
            "Same pairs, scored over HTTP (PNG data URLs) and in-process",
            ["pair", "over HTTP", "in-process"],
            [[k, float(r), float(s)] for k, (r, s) in enumerate(zip(remote_scores, local_scores))],
        )
        print(f"largest difference: {gap:.2e} (must be < 1e-4)")
        assert gap < 1e-4, f"remote and in-process scores differ by {gap}"

        # Replicas: a second server; it is killed mid-way and the client carries on.
        with _server_for(model) as second:
            replicas = PacoReward.from_server(
                [server.base_url, second.base_url], "paco-demo", cache_size=0
            )
            before_kill = replicas.score_pairs(pairs[8:16])
            second.kill()
            after_kill = replicas.score_pairs(pairs[16:24])
            spread = replicas.backend.replica_info()
        gap = float(np.max(np.abs(np.r_[before_kill, after_kill] - local.score_pairs(pairs[8:24]))))
        print(
            "two replicas, the second killed after 8 pairs: "
            + ", ".join(f"{r['url']} sent {r['sent']}, down={r['down']}" for r in spread)
            + f"; largest difference from in-process {gap:.2e}"
        )
        assert gap < 1e-4 and spread[1]["down"], (gap, spread)

        in_process = measure_in_process(local, pairs, SECONDS)
        load = measure_server(server.base_url, "paco-demo", pairs, CLIENTS, SECONDS)
        health = httpx.get(server.base_url.removesuffix("/v1") + "/health").json()
    print_table(
        f"Throughput: {CLIENTS} concurrent clients on loopback, one pair per request",
        ["path", "pairs/s", "vs in-process", "p50 ms", "p99 ms", "errors"],
        [
            ["in-process score_pairs", f"{in_process:.1f}", "1.00", "", "", ""],
            [
                "HTTP, micro-batched",
                f"{load.pairs_per_s:.1f}",
                f"{load.pairs_per_s / in_process:.2f}",
                f"{load.p50_ms:.0f}",
                f"{load.p99_ms:.0f}",
                load.errors,
            ],
        ],
    )
    print(f"server micro-batches: {health['models']['paco-demo']['batching']}; server stopped")
    ctx.artifacts["server_throughput"] = {"in_process": in_process, "server": load.pairs_per_s}
    assert load.errors == 0
