"""The annotation app under load: ``/api/progress`` latency, and submission latency alone and
while a client polls ``/api/progress``, on a synthetic work folder with thousands of rankings.

The server is ``paco-data annotate`` in a child process, as a user runs it; its store starts
with simulated annotators' rankings (3 per instance). Each submission is a new annotator's
ranking of an instance, over loopback HTTP.

    python -m benchmarks.annotate_load                     # 6,624 rankings of 2,208 instances
    python -m benchmarks.annotate_load --rankings 600 --submits 20
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from paco_reward.command_line import Command, config_field, run_cli
from paco_reward.errors import ConfigError

PROG = "python -m benchmarks.annotate_load"
# The synthetic folder's pairing: 4 grids of 2x2 panels per prompt make 48 instances, each
# ranked by 3 simulated annotators.
INSTANCES_PER_PROMPT = 48
ANNOTATORS = 3


@dataclass
class AnnotateLoadArguments:
    """The annotation app under load: progress latency, and submissions with and without a
    client polling the progress."""

    rankings: int = config_field(
        6600, help="Rankings in the store to start with (rounded up to whole prompts)."
    )
    team: int = config_field(
        24, help="Annotators sharing those rankings (each instance ranked by 3 of them)."
    )
    submits: int = config_field(100, help="Submissions timed per run (alone, then polled).")
    progress_calls: int = config_field(20, help="Timed /api/progress requests.")
    output: str | None = config_field(None, help="Write the results as JSON here.")

    def __post_init__(self) -> None:
        if self.team < ANNOTATORS:
            raise ConfigError(f"--team must be at least {ANNOTATORS}; got {self.team}")


@dataclass
class Latency:
    """Latencies of one kind of request, in milliseconds."""

    requests: int
    p50_ms: float
    p95_ms: float

    @classmethod
    def of(cls, seconds: list[float]) -> Latency:
        ms = sorted(1000 * s for s in seconds)
        p95 = ms[min(len(ms) - 1, math.ceil(0.95 * len(ms)) - 1)]
        return cls(len(ms), round(statistics.median(ms), 1), round(p95, 1))


def make_work_folder(root: Path, rankings: int, team: int) -> Path:
    """A synthetic work folder up to its instances, whose store holds 3 simulated rankings of
    every instance (``rankings`` rounded up to whole prompts), by a team of ``team``
    annotators taking turns: the 3 rankings of an instance are by 3 of them."""
    from data_pipeline.generate import ingest_grids
    from data_pipeline.instances import build_instances
    from data_pipeline.pipeline import SyntheticConfig, make_synthetic_inputs, simulate_rankings
    from data_pipeline.prompts import prepare_prompts
    from data_pipeline.rankings import ANNOTATIONS_FILE
    from data_pipeline.storage import read_jsonl, write_jsonl

    work = root / "work"
    n_prompts = max(1, math.ceil(rankings / (ANNOTATORS * INSTANCES_PER_PROMPT)))
    config = SyntheticConfig(n_prompts=n_prompts, panel_size=32, annotators=ANNOTATORS, seed=3)
    inputs = make_synthetic_inputs(work, config)
    prepare_prompts(inputs["prompts"], work, source="synthetic")
    ingest_grids(inputs["grids"], work)
    build_instances(work)
    simulated = simulate_rankings(work, root / "simulated.jsonl")
    records = read_jsonl(simulated)  # the simulator's records go instance by instance
    for i, record in enumerate(records):
        record.update(
            annotator=f"annotator{i % team}",
            time=f"2026-01-01T00:00:{i % 60:02d}.000Z",
            seconds=5.0 + i % 7,
        )
    # One write of the whole store (the lines annotation_store(work).append would write).
    write_jsonl(work / ANNOTATIONS_FILE, records)
    return work


class AnnotateServer:
    """``paco-data annotate WORK`` in a child process: the interpreter and the
    ``data_pipeline`` this process runs (not one the child's working folder would shadow)."""

    def __init__(self, work: Path, port: int) -> None:
        import data_pipeline

        self.url = f"http://127.0.0.1:{port}"
        root = str(Path(data_pipeline.__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", "data_pipeline.cli", "annotate", str(work)]
        self.process = subprocess.Popen(
            [*command, "--port", str(port), "--log_level", "warning"],
            cwd=work,
            env={**os.environ, "PYTHONPATH": path},
            stdout=subprocess.DEVNULL,
        )

    def __enter__(self) -> AnnotateServer:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"paco-data annotate exited ({self.process.returncode})")
            try:
                if httpx.get(self.url + "/api/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise TimeoutError(f"paco-data annotate at {self.url} did not answer in 120 s")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def timed(call) -> float:
    start = time.perf_counter()
    response = call()
    elapsed = time.perf_counter() - start
    response.raise_for_status()
    return elapsed


def submit_all(client: httpx.Client, annotator: str, instances: list[dict]) -> list[float]:
    """Seconds of each submission of ``annotator``'s ranking (candidates in order)."""
    from data_pipeline.annotate.store import candidate_id

    seconds = []
    for instance in instances:
        ranking = [[candidate_id(c)] for c in instance["candidates"]]
        body = {"annotator": annotator, "instance_id": instance["instance_id"], "ranking": ranking}
        seconds.append(timed(lambda b=body: client.post("/api/rankings", json=b)))
    return seconds


def run(args: AnnotateLoadArguments) -> int:
    """Build the folder, serve it, time the requests and print the table."""
    from data_pipeline.instances import INSTANCES_FILE
    from data_pipeline.storage import read_jsonl
    from paco_reward.server.runner import free_port

    with tempfile.TemporaryDirectory() as tmp:
        work = make_work_folder(Path(tmp), args.rankings, args.team)
        instances = read_jsonl(work / INSTANCES_FILE)
        if len(instances) < 2 * args.submits:
            raise ConfigError(f"--submits {args.submits} needs {2 * args.submits} instances")
        with (
            AnnotateServer(work, free_port()) as server,
            httpx.Client(base_url=server.url, timeout=120) as client,
        ):
            first = timed(lambda: client.get("/api/progress"))
            stored = client.get("/api/progress").json()["rankings"]
            progress = [
                timed(lambda: client.get("/api/progress")) for _ in range(args.progress_calls)
            ]
            alone = submit_all(client, "bench-alone", instances[: args.submits])

            polling, stop, polls = threading.Event(), threading.Event(), []

            def poll() -> None:
                with httpx.Client(base_url=server.url, timeout=120) as poller:
                    while not stop.is_set():
                        polls.append(timed(lambda: poller.get("/api/progress")))
                        polling.set()

            poller = threading.Thread(target=poll)
            poller.start()
            try:
                polling.wait(timeout=120)
                polled = submit_all(
                    client, "bench-polled", instances[args.submits : 2 * args.submits]
                )
            finally:
                stop.set()
                poller.join()
            final = client.get("/api/progress").json()["rankings"]
        if not polls:
            raise RuntimeError("the polling client got no answer from /api/progress")
        if final != stored + 2 * args.submits:
            raise RuntimeError(
                f"progress counts {final} rankings, expected {stored + 2 * args.submits}"
            )

    results = {
        "rankings": stored,
        "instances": len(instances),
        "first_progress_ms": round(1000 * first, 1),
        "progress": asdict(Latency.of(progress)),
        "submit_alone": asdict(Latency.of(alone)),
        "submit_while_polled": asdict(Latency.of(polled)),
        "progress_while_submitting": asdict(Latency.of(polls)),
    }
    print(f"\n{stored} rankings of {len(instances)} instances; loopback, paco-data annotate")
    print(f"{'request':<34}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}")
    print(f"{'GET /api/progress (first)':<34}{1:>6}{results['first_progress_ms']:>10}{'':>10}")
    for label, key in (
        ("GET /api/progress", "progress"),
        ("POST /api/rankings", "submit_alone"),
        ("POST /api/rankings, progress polled", "submit_while_polled"),
        ("GET /api/progress, while polled", "progress_while_submitting"),
    ):
        r = results[key]
        print(f"{label:<34}{r['requests']:>6}{r['p50_ms']:>10}{r['p95_ms']:>10}")
    if args.output:
        Path(args.output).write_text(json.dumps(results, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("annotate-load", AnnotateLoadArguments, run, "Load the annotation app.")
    return run_cli(PROG, __doc__.splitlines()[0], [command], argv)


if __name__ == "__main__":
    raise SystemExit(main())
