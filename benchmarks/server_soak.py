"""Reward-server soak: many distinct instructions, the server's resident memory before and
after (it stays flat: every per-instruction cache is a bounded LRU, ``paco_reward.lru``).

The server runs in a child process (``paco-reward serve``, as deployed); a client scores one
pair of small images under ``--instructions`` distinct themes (each ``--theme-chars`` long),
``--batch`` requests at a time, with the client's cache off so each reaches the server. The
server's RSS (``/proc/PID/status`` ``VmRSS``) is printed after a warm-up that fills the
caches to their bound, every ``--every`` instructions, and at the end; the run fails when
the end exceeds the warm RSS by more than ``--max-growth-mib``.

    python -m benchmarks.server_soak                        # 20,000 themes, tiny model
    python -m benchmarks.server_soak --instructions 100000 --theme-chars 8000
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from paco_reward import PacoReward
from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.lru import PER_INSTRUCTION_CACHE_SIZE

PROG = "python -m benchmarks.server_soak"


@dataclass
class ServerSoakArguments:
    """Reward-server soak: distinct instructions in, the server's RSS out."""

    model: str | None = config_field(None, help="Model folder (default: a tiny model built now).")
    instructions: int = config_field(20_000, help="Distinct instructions sent.")
    theme_chars: int = config_field(2_000, help="Characters of each theme (padded).")
    batch: int = config_field(64, help="Pairs per client call (sent concurrently).")
    every: int = config_field(5_000, help="Print the RSS every this many instructions.")
    warmup: int = config_field(
        2 * PER_INSTRUCTION_CACHE_SIZE, help="Instructions before the first RSS (fills the caches)."
    )
    max_growth_mib: float = config_field(64.0, help="Fail when the RSS grows more than this.")
    output: str | None = config_field(None, help="Write the figures as JSON here.")


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def theme(i: int, chars: int) -> str:
    """The ``i``-th distinct theme, padded to ``chars`` characters."""
    head = f"soak theme {i}: "
    return head + ("a fox in the snow " * (chars // 18 + 1))[: max(0, chars - len(head))]


def run(args: ServerSoakArguments) -> int:
    """Soak the server as ``args`` say; print the RSS table; exit 1 when it grew."""
    from paco_reward.server import ServerProcess

    rng = np.random.default_rng(0)
    a, b = (Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(2))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model) if args.model else None
        if model_dir is None:
            from paco_reward.testing import build_tiny_qwen2_5_vl

            model_dir = build_tiny_qwen2_5_vl(Path(tmp) / "tiny", seed=0)
        with ServerProcess(model_dir, args=["--served-model-name", "soak"]) as server:
            pid = server.process.pid
            remote = PacoReward.from_server(server.base_url, "soak", cache_size=0, timeout=120)
            rows: list[tuple[int, float, float]] = [(0, 0.0, rss_mib(pid))]
            start, sent, nan = time.perf_counter(), 0, 0
            marks = {args.warmup, args.instructions}
            marks.update(range(args.every, args.instructions, args.every))
            while sent < args.instructions:
                step = min(
                    args.batch, args.instructions - sent, *(m - sent for m in marks if m > sent)
                )
                pairs = [(a, b, theme(sent + k, args.theme_chars)) for k in range(step)]
                nan += int(np.isnan(remote.score_pairs(pairs)).sum())
                sent += step
                if sent in marks:
                    rows.append((sent, time.perf_counter() - start, rss_mib(pid)))
            remote.backend.close()
    warm = next(r for r in rows if r[0] == args.warmup)[2] if args.warmup else rows[0][2]
    end = rows[-1][2]
    print(f"\nmodel {model_dir}, {args.instructions} distinct themes of {args.theme_chars} chars")
    print(f"{'instructions':>13}{'seconds':>10}{'server RSS MiB':>16}")
    for count, seconds, rss in rows:
        print(f"{count:>13}{seconds:>10.1f}{rss:>16.1f}")
    growth = end - warm
    print(f"growth after warm-up ({args.warmup} themes): {growth:+.1f} MiB; NaN scores: {nan}")
    if args.output:
        Path(args.output).write_text(
            json.dumps({"rows": rows, "growth_mib": growth, "nan": nan}, indent=2)
        )
    if nan or growth > args.max_growth_mib:
        raise RuntimeError(f"server RSS grew {growth:.1f} MiB (or {nan} NaN scores)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("server-soak", ServerSoakArguments, run, "Soak the server.")
    return run_cli(PROG, __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    raise SystemExit(main())
