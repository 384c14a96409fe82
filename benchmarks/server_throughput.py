"""Reward-server throughput: N concurrent clients scoring single pairs over loopback HTTP
vs in-process ``score_pairs`` on the same model.

Each client sends one pair per request (cache off, so every call reaches the server) for a
fixed time; the server's micro-batching merges concurrent requests into one forward pass.
The in-process reference scores the same pairs with ``score_pairs`` in batches of
``--max-batch-size``. Optionally the server is also run with micro-batching off
(``--max-batch-size 1``) to show what batching buys. The server runs in a child process
(its own interpreter, as in deployment) unless ``--in-thread``.

    python -m benchmarks.server_throughput                       # tiny model built offline
    python -m benchmarks.server_throughput --clients 64 --seconds 20 --compare-unbatched
    python -m benchmarks.server_throughput --model PATH --image-size 512
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from paco_reward import PacoReward
from paco_reward.command_line import Command, config_field, run_cli

PROG = "python -m benchmarks.server_throughput"


@dataclass
class ServerThroughputArguments:
    """Reward-server throughput: N concurrent clients over loopback vs in-process scoring."""

    model: str | None = config_field(None, help="Model folder (default: a tiny model built now).")
    clients: int = config_field(32, help="Concurrent clients.")
    seconds: float = config_field(10.0, help="Duration of each load run.")
    pairs: int = config_field(64, help="Distinct pairs cycled through.")
    image_size: int = config_field(64, help="Image side in pixels.")
    max_batch_size: int = config_field(32, help="The server's micro-batch size.")
    max_wait_ms: float = config_field(5.0, help="The server's micro-batch wait.")
    compare_unbatched: bool = config_field(False, help="Also run the server at batch size 1.")
    in_thread: bool = config_field(False, help="Run the server in this process.")
    output: str | None = config_field(None, help="Write the results as JSON here.")


@dataclass
class LoadResult:
    """What one load run measured."""

    clients: int
    requests: int
    errors: int
    seconds: float
    pairs_per_s: float
    p50_ms: float
    p99_ms: float


def make_pairs(n: int, size: int, seed: int = 0) -> list[tuple[Image.Image, Image.Image, str]]:
    """``n`` pairs of distinct random images (no two requests share an image)."""
    rng = np.random.default_rng(seed)
    images = [
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(2 * n)
    ]
    return [(images[2 * i], images[2 * i + 1], f"theme {i % 7}") for i in range(n)]


def measure_in_process(rm: PacoReward, pairs: list, seconds: float) -> float:
    """Pairs/s of ``rm.score_pairs(pairs)``, repeated for about ``seconds``."""
    rm.score_pairs(pairs[:2])  # warm-up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        rm.score_pairs(pairs)
        done += len(pairs)
    return done / (time.perf_counter() - start)


def measure_server(
    base_url: str, model: str, pairs: list, clients: int, seconds: float
) -> LoadResult:
    """``clients`` concurrent clients, each scoring one pair per request for ``seconds``."""
    remotes = [
        PacoReward.from_server(base_url, model, cache_size=0, retries=0, timeout=120)
        for _ in range(clients)
    ]
    latencies: list[float] = []
    errors = 0

    async def client(k: int, stop_at: float) -> None:
        nonlocal errors
        i = k
        while time.monotonic() < stop_at:
            start = time.perf_counter()
            try:
                await remotes[k].ascore_pairs([pairs[i % len(pairs)]])
            except Exception:  # noqa: BLE001 - counted
                errors += 1
                continue
            latencies.append(time.perf_counter() - start)
            i += clients

    async def run() -> float:
        await asyncio.gather(*(remotes[k].ascore_pairs([pairs[k % len(pairs)]]) for k in range(2)))
        start = time.perf_counter()
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*(client(k, stop_at) for k in range(clients)))
        return time.perf_counter() - start

    elapsed = asyncio.run(run())
    for remote in remotes:
        remote.backend.close()
    p50, p99 = (np.percentile(latencies, [50, 99]) * 1000) if latencies else (np.nan, np.nan)
    return LoadResult(
        clients=clients,
        requests=len(latencies),
        errors=errors,
        seconds=round(elapsed, 2),
        pairs_per_s=len(latencies) / elapsed,
        p50_ms=float(p50),
        p99_ms=float(p99),
    )


def _serve(args: ServerThroughputArguments, model_dir: Path, max_batch_size: int):
    if args.in_thread:
        from paco_reward.local_backend import LocalBackend
        from paco_reward.server import ServerConfig, ServerThread, create_app

        backend = LocalBackend.from_pretrained(model_dir, batch_size=max_batch_size)
        config = ServerConfig("bench", max_batch_size=max_batch_size, max_wait_ms=args.max_wait_ms)
        return ServerThread(create_app(backend, config))
    from paco_reward.server import ServerProcess

    flags = ["--served-model-name", "bench", "--max-batch-size", str(max_batch_size)]
    return ServerProcess(model_dir, args=[*flags, "--max-wait-ms", str(args.max_wait_ms)])


def run(args: ServerThroughputArguments) -> int:
    """Load the server as ``args`` say, print the table; exit 1 when a request failed."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model) if args.model else None
        if model_dir is None:
            from paco_reward.testing import build_tiny_qwen2_5_vl

            model_dir = build_tiny_qwen2_5_vl(Path(tmp) / "tiny", seed=0)
        pairs = make_pairs(args.pairs, args.image_size)
        rm = PacoReward.from_pretrained(model_dir, batch_size=args.max_batch_size)
        in_process = measure_in_process(rm, pairs, args.seconds)
        runs: dict[str, LoadResult] = {}
        sizes = {"server (micro-batched)": args.max_batch_size}
        if args.compare_unbatched:
            sizes["server (batch size 1)"] = 1
        for label, size in sizes.items():
            with _serve(args, model_dir, size) as server:
                remote = PacoReward.from_server(server.base_url, "bench")
                check = remote.score_pairs(pairs[:8])
                np.testing.assert_allclose(check, rm.score_pairs(pairs[:8]), atol=1e-4)
                runs[label] = measure_server(
                    server.base_url, "bench", pairs, args.clients, args.seconds
                )

    print(f"\nmodel {model_dir}, {args.image_size}px images, {args.clients} clients, loopback")
    print(f"{'path':<26}{'pairs/s':>10}{'vs in-proc':>12}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    print(f"{'in-process score_pairs':<26}{in_process:>10.1f}{1.0:>12.2f}{'':>9}{'':>9}{'':>8}")
    for label, r in runs.items():
        ratio = r.pairs_per_s / in_process
        print(
            f"{label:<26}{r.pairs_per_s:>10.1f}{ratio:>12.2f}{r.p50_ms:>9.0f}{r.p99_ms:>9.0f}"
            f"{r.errors:>8}"
        )
    if args.output:
        report = {"in_process_pairs_per_s": in_process, **{k: asdict(v) for k, v in runs.items()}}
        Path(args.output).write_text(json.dumps(report, indent=2))
    failed = {label: r.errors for label, r in runs.items() if r.errors}
    if failed:
        raise RuntimeError(f"requests failed under load: {failed}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("server-throughput", ServerThroughputArguments, run, "Load the server.")
    return run_cli(PROG, __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    raise SystemExit(main())
