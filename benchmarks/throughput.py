"""Scoring throughput: the model card's one-pair loop vs ``score_pairs`` vs ``score_grid``.

All three score the same 6 panel pairs of a 2x2 grid with the same model, in one
process, interleaved over several rounds (these machines are noisy); the table
reports pairs/s for each and the speed-up over the snippet loop.

    python -m benchmarks.throughput                      # tiny model built offline
    python -m benchmarks.throughput --model PATH --panel-size 512 --rounds 5
    python -m benchmarks.throughput --config 7b          # random weights, real 7B shape (GPU)

``--engines`` compares scoring engines instead, on the same model (the vLLM-compatible tiny
one unless ``--model``) and the same pairs, interleaved over rounds, each round on fresh
images (so no engine's cache serves a later round): the transformers backend, vLLM
in-process (``backend="vllm"``) and stock vLLM servers through ``from_server`` (one, and
two replicas). Run it with the vLLM venv's python:

    .venv-vllm/bin/python -m benchmarks.throughput --engines all --pairs 48 --rounds 5
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from PIL import Image

from benchmarks.model_card_snippet import ModelCardScorer
from paco_reward import PacoReward
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError
from paco_reward.templates import render_instruction


@dataclass
class ThroughputArguments:
    """Scoring throughput: the model card's one-pair loop vs score_pairs vs score_grid."""

    model: str | None = config_field(None, help="Model folder (default: build a tiny random one).")
    config: Literal["tiny", "7b"] = config_field(
        "tiny", help="Shape of the built model ('7b': random weights, real 7B shape; GPU)."
    )
    panel_size: int = config_field(256, help="Panel side in pixels.")
    min_pixels: int = config_field(4 * 28 * 28, help="Image budget (min) of the built model.")
    max_pixels: int = config_field(16 * 28 * 28, help="Image budget (max) of the built model.")
    rounds: int = config_field(5, help="Interleaved timing rounds.")
    batch_size: int = config_field(8, help="PacoReward pairs per forward.")
    device: str | None = config_field(None, help="torch device (default: cuda if available).")
    dtype: str | None = config_field(None, help="torch dtype (default: bf16 on GPU).")
    engines: str | None = config_field(
        None,
        help="Compare scoring engines instead: comma-separated from transformers, vllm, "
        "vllm-server, vllm-server-x2, or 'all'.",
    )
    pairs: int = config_field(48, help="Pairs per round (with --engines).")
    concurrency: int = config_field(16, help="Requests in flight per client (with --engines).")


def make_grid(panel_size: int, seed: int = 0) -> tuple[Image.Image, list[Image.Image]]:
    rng = np.random.default_rng(seed)
    panels = [
        Image.fromarray(rng.integers(0, 256, (panel_size, panel_size, 3), dtype=np.uint8))
        for _ in range(4)
    ]
    grid = Image.new("RGB", (2 * panel_size, 2 * panel_size))
    for k, panel in enumerate(panels):
        grid.paste(panel, ((k % 2) * panel_size, (k // 2) * panel_size))
    return grid, panels


def build_model(args: ThroughputArguments, workdir: Path) -> Path:
    if args.model:
        return Path(args.model)
    from paco_reward.testing import build_tiny_model
    from paco_reward.testing.qwen import QWEN_7B_SHAPE

    overrides = QWEN_7B_SHAPE if args.config == "7b" else {}
    return build_tiny_model(
        workdir / "model", min_pixels=args.min_pixels, max_pixels=args.max_pixels, **overrides
    )


ENGINES = ("transformers", "vllm", "vllm-server", "vllm-server-x2")


def engine_pairs(n: int, panel_size: int, seed: int) -> list[tuple]:
    """``n`` pairs over ``n`` distinct random panels (each panel in two pairs), 4 themes."""
    rng = np.random.default_rng(seed)
    panels = [
        Image.fromarray(rng.integers(0, 256, (panel_size, panel_size, 3), dtype=np.uint8))
        for _ in range(n)
    ]
    return [(panels[i], panels[(i + 1) % n], f"theme {i % 4}") for i in range(n)]


def compare_engines(args) -> None:
    """pairs/s of each engine in ``args.engines`` on the same pairs, side by side."""
    from contextlib import ExitStack

    from paco_reward.testing import build_tiny_model
    from paco_reward.testing.vllm_server import CPU_ARGS, VLLMServer

    engines = list(ENGINES) if args.engines == "all" else args.engines.split(",")
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise ConfigError(f"unknown engines {unknown}; choose from {ENGINES} or 'all'.")
    server_args = [*CPU_ARGS, "--no-enable-prefix-caching"]
    llm_kwargs = {
        "enforce_eager": True,
        "max_model_len": 4096,
        "kv_cache_memory_bytes": 1 << 30,
        "enable_prefix_caching": False,
    }
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        model_dir = (
            Path(args.model)
            if args.model
            else build_tiny_model(
                Path(tmp) / "model",
                min_pixels=args.min_pixels,
                max_pixels=args.max_pixels,
                vllm_compatible=True,
            )
        )
        scorers: dict[str, PacoReward] = {}
        servers = []
        for engine in engines:
            if engine == "transformers":
                scorers[engine] = PacoReward.from_pretrained(
                    model_dir, batch_size=args.batch_size, device=args.device
                )
            elif engine == "vllm":
                scorers[engine] = PacoReward.from_pretrained(
                    model_dir, backend="vllm", **llm_kwargs
                )
            else:
                replicas = 2 if engine.endswith("x2") else 1
                while len(servers) < replicas:
                    log = Path(tmp) / f"server{len(servers)}.log"
                    servers.append(
                        stack.enter_context(
                            VLLMServer(model_dir, "bench", args=server_args, log_path=log)
                        )
                    )
                scorers[engine] = PacoReward.from_server(
                    [server.base_url for server in servers[:replicas]],
                    "bench",
                    cache_size=0,
                    max_concurrency=args.concurrency,
                )
        warm = engine_pairs(args.pairs, args.panel_size, seed=10_000)
        reference = None
        for name, rm in scorers.items():  # warm-up, and a correctness check on the side
            scores = rm.score_pairs(warm)
            reference = scores if reference is None else reference
            np.testing.assert_allclose(scores, reference, atol=1e-5, err_msg=name)
        times: dict[str, list[float]] = {name: [] for name in scorers}
        for round_ in range(args.rounds):
            pairs = engine_pairs(args.pairs, args.panel_size, seed=round_)
            for name, rm in scorers.items():
                start = time.perf_counter()
                rm.score_pairs(pairs)
                times[name].append(time.perf_counter() - start)

    first = next(iter(times))
    print(
        f"\nEngines on {torch.get_num_threads()} CPU threads: {args.pairs} pairs of "
        f"{args.panel_size}px panels per round, {args.rounds} interleaved rounds, fresh images "
        "each round"
    )
    print(f"ratio = pairs/s over {first}'s (median over rounds; best-of-rounds in brackets)")
    print(f"{'engine':16s} {'pairs/s':>9s} {'ratio':>7s} {'(best)':>8s}")
    for name, samples in times.items():
        median, best = statistics.median(samples), min(samples)
        print(
            f"{name:16s} {args.pairs / median:9.1f} "
            f"{statistics.median(times[first]) / median:6.2f}x ({min(times[first]) / best:5.2f}x)"
        )


def run(args: ThroughputArguments) -> int:
    """Time the three scoring paths (or, with ``engines``, the engines) and print the table."""
    if args.engines:
        compare_engines(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(args, Path(tmp))
        rm = PacoReward.from_pretrained(
            model_dir,
            device=args.device,
            dtype=args.dtype,
            batch_size=args.batch_size,
            canonical_yes_no=False,
        )
        snippet = ModelCardScorer(rm.backend.model, rm.backend.processor)
        theme = "a red fox walking through four seasons"
        instruction = render_instruction("consistency", theme)
        grid, panels = make_grid(args.panel_size)
        pairs = list(combinations(range(4), 2))
        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)

        def snippet_loop():
            return [snippet.score(panels[i], panels[j], instruction) for i, j in pairs]

        methods = {
            "model-card snippet loop": snippet_loop,
            "score_pairs": lambda: rm.score_pairs(
                [(panels[i], panels[j], theme) for i, j in pairs]
            ),
            "score_grid": lambda: rm.score_grid(grid, theme, layout=(2, 2)).scores,
        }
        reference = np.asarray(snippet_loop())
        for name, fn in methods.items():  # warm-up, and a correctness check on the side
            np.testing.assert_allclose(np.asarray(fn()), reference, atol=1e-3, err_msg=name)
        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, fn in methods.items():
                sync()
                start = time.perf_counter()
                fn()
                sync()
                times[name].append(time.perf_counter() - start)

    device = rm.backend.device
    print(
        f"\nThroughput on {device} ({torch.get_num_threads()} threads), model {args.config}, "
        f"{args.panel_size}px panels, 6 pairs of a 2x2 grid, {args.rounds} interleaved rounds"
    )
    print("speed-up = snippet time / method time (median over rounds; best-of-rounds in brackets)")
    print(f"{'method':26s} {'pairs/s':>10s} {'speed-up':>9s} {'(best)':>8s}")
    base_median = statistics.median(times["model-card snippet loop"])
    base_best = min(times["model-card snippet loop"])
    for name, samples in times.items():
        median, best = statistics.median(samples), min(samples)
        print(
            f"{name:26s} {len(pairs) / median:10.1f} {base_median / median:8.2f}x "
            f"({base_best / best:5.2f}x)"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("throughput", ThroughputArguments, run, "Time the scoring paths.")
    return run_cli("python -m benchmarks.throughput", __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    sys.exit(main())
