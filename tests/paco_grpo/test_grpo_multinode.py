"""Several nodes as docs/multinode.md documents them: the page's runnable blocks run as
written, in order, in one shell of a fresh folder (with the repository's ``recipes/``): the
planner for 2 x 7 processes, then two "nodes" of two CPU processes on loopback, each started
by ``recipes/launch_multinode.sh`` with its own ``paco-reward serve`` of a tiny judge, for one
epoch, then the same commands resuming for a second.

The test changes only what one shared machine needs: a free port for each node's server in
place of 8001/8002 and for the rendezvous (``MAIN_PORT``); and before each launch it sets
``TRAIN_PROGRAM`` to ``launch_probe.py``, which runs ``paco-grpo train`` and records what
each rank sampled, scored and trained, and what its server's ``/health`` counted.

Checked: one job of 4 processes over 2 nodes; every process scored on its own node's server,
and each server answered exactly its node's pairs of the epoch, none of the other node's;
the advantages every rank trained on equal those one process computes from the rewards
gathered over both nodes; the second launch starts from the first one's checkpoint. A
one-process run does not sample the same images, so it is not compared: each process draws
its noise from a generator seeded by (seed, epoch, rank), and one process would draw the
slots of ranks 1-3 from rank 0's generator.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paco_grpo.epoch_shape import EpochShape, EpochShapeError
from paco_grpo.grpo_config import GRPOConfig
from paco_reward.server.runner import free_port
from tests.paco_grpo.launch_probe import gathered_advantages, read_ranks
from tests.test_readme import runnable_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "multinode.md"
PROBE = Path(__file__).with_name("launch_probe.py")
RECIPE = ROOT / "recipes" / "grpo_multinode_tiny_cpu.yaml"
NODES, PER_NODE = 2, 2
PAIRS_PER_IMAGE = 6  # the 2x2 grid's panel pairs


def _script(blocks: list[str], work: Path, ports: dict[int, int]) -> str:
    """The page's blocks as one shell script: the test's ports in place of the page's, and
    TRAIN_PROGRAM set before each launch block (the first launch records as ``first``, the
    resuming one as ``resumed``)."""
    launches = iter(["first", "resumed"])
    lines = ["set -euo pipefail"]
    for index, code in enumerate(blocks):
        for page_port, port in ports.items():
            code = code.replace(f"REWARD_PORT={page_port}", f"REWARD_PORT={port}")
        if "launch_multinode.sh" in code:
            program = f"{PROBE} {work / next(launches)} train"
            lines.append(f"export TRAIN_PROGRAM='{program}'")
        lines += [f'echo "=== block {index} at $SECONDS s"', code]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """The page run once: its output by block, the records of both launches, the folder."""
    work = tmp_path_factory.mktemp("multinode")
    (work / "recipes").symlink_to(ROOT / "recipes")
    blocks = [code for language, code in runnable_blocks(PAGE.read_text())]
    free = set()
    while len(free) < 3:  # each node's server and the rendezvous, on ports of their own
        free.add(free_port())
    node_0, node_1, rendezvous = sorted(free)
    ports = {8001: node_0, 8002: node_1}
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MAIN_PORT": str(rendezvous),
    }
    env.pop("ACCELERATE_USE_CPU", None)  # the page sets it
    shell = subprocess.Popen(
        ["bash", "-c", _script(blocks, work, ports)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a node left running by a failure goes with the group
    )
    try:
        output, _ = shell.communicate(timeout=900)
    finally:
        if shell.poll() is None or shell.returncode:
            with contextlib.suppress(ProcessLookupError):  # nothing of the group left
                os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    assert shell.returncode == 0, output[-6000:]
    by_block = re.split(r"^=== block \d+ at \d+ s\n", output, flags=re.M)[1:]
    assert len(by_block) == len(blocks) == 4, output[-3000:]
    return {
        "work": work,
        "ports": ports,
        "plan": by_block[0],
        "outputs": {"first": by_block[2], "resumed": by_block[3]},
        "ranks": {run: read_ranks(work / run, 0, NODES * PER_NODE) for run in ("first", "resumed")},
        "cfg": GRPOConfig.from_yaml(RECIPE),
    }


@pytest.mark.slow
def test_the_planner_splits_the_paper_recipe_over_two_nodes(launched):
    plan = launched["plan"]
    for fact in ("- processes: 14", "- nodes: 2", "- processes per node: 7",
                 "- gpus per node: 8", "- images per process per epoch: 48",
                 "- optimizer steps per epoch: 1",
                 "http://127.0.0.1:8000/v1 serves consistency (X-GenGroup/PaCo-Reward-7B): "
                 "node-local: one on each node's reward GPU (2 in all), each called by its "
                 "node's 7 process(es); 8.29 B parameters, 15.4 GiB of bfloat16 weights",
                 "- verdict: fits: 41.9 GiB of 80.0 GiB"):  # fmt: skip
        assert fact in plan, fact
    page = PAGE.read_text()
    quoted = re.search(r"```text\n(.*?)```", page, re.S).group(1)
    assert all(line in plan for line in quoted.splitlines()), "the page quotes another plan"


@pytest.mark.slow
def test_two_nodes_run_as_one_job(launched):
    cfg = launched["cfg"]
    images = cfg.prompts_per_epoch * cfg.num_generations
    for run in ("first", "resumed"):
        output, ranks = launched["outputs"][run], launched["ranks"][run]
        # each node's first process says it is one of 4 and the job's first plans it as 2 x 2,
        # training and again resuming in the probe
        line = f"paco-grpo: {NODES * PER_NODE} process(es); {images} images per epoch"
        assert output.count(line) == NODES * 2, output[-3000:]
        assert output.count("- processes: 4\n- nodes: 2\n- processes per node: 2\n") == 2
        assert output.count(f"node 0 of {NODES}: reward server") == 1
        assert output.count(f"node 1 of {NODES}: reward server") == 1
        assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
        assert [r["node"] for r in ranks] == [0, 0, 1, 1]  # torchrun's node of each rank
        (slots,) = {len(r["epochs"]) for r in ranks}
        assert slots == 1
        shares = [r["epochs"][0]["slots"] for r in ranks]  # together, the whole epoch
        assert sorted(s for share in shares for s in share) == list(range(images))


@pytest.mark.slow
def test_every_process_scores_on_its_own_nodes_server(launched):
    """Each rank's reward client points at its node's port, and that server's /health
    counted exactly the pairs of its node's two processes: 2 x 2 images x 6 panel pairs,
    half the epoch's, so none of the other node's."""
    cfg = launched["cfg"]
    images_per_node = cfg.prompts_per_epoch * cfg.num_generations // NODES
    ports = list(launched["ports"].values())
    for run in ("first", "resumed"):
        for r in launched["ranks"][run]:
            url = f"http://127.0.0.1:{ports[r['node']]}/v1"
            (served,) = r["reward_servers"].values()
            assert list(served) == [url], (run, r["rank"], served)
            assert list(served[url]["models"]) == ["PaCo-Reward-7B"]
            health = served[url]["models"]["PaCo-Reward-7B"]
            assert health["batching"]["pairs"] == images_per_node * PAIRS_PER_IMAGE
            assert np.isfinite(r["epochs"][0]["rewards"]["consistency"]).all()
    # each node's server wrote its own log; both are gone once training ended
    for node, port in enumerate(ports):
        log = (launched["work"] / f"reward_server.node{node}.log").read_text()
        assert f"on http://127.0.0.1:{port}/v1" in log


@pytest.mark.slow
def test_advantages_are_those_of_the_groups_gathered_over_both_nodes(launched):
    cfg = launched["cfg"]
    for run in ("first", "resumed"):
        trained, expected = gathered_advantages(cfg, launched["ranks"][run])
        np.testing.assert_allclose(trained, expected, rtol=0, atol=1e-12)
        assert np.abs(trained).max() > 0  # the judge told the images apart


@pytest.mark.slow
def test_the_second_launch_resumes_the_first_ones_checkpoint(launched):
    first, resumed = launched["ranks"]["first"], launched["ranks"]["resumed"]
    for a, b in zip(first, resumed, strict=True):
        assert a["epochs"][0]["epoch"] == 0 and b["epochs"][0]["epoch"] == 1
        assert b["lora_start"] == a["lora_trained"]  # the checkpoint's LoRA, on every rank
        assert b["lora_trained"] != a["lora_trained"]  # and epoch 1 trained it further
        assert a["lora_resumed"] == a["lora_trained"] and b["lora_resumed"] == b["lora_trained"]
    out = launched["work"] / launched["cfg"].output_dir
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-00001",
        "checkpoint-00002",
    ]


def test_the_node_counts_the_page_gives_for_the_paper_recipe():
    """The paper's recipe on N nodes of 7: the N the page and the recipe name are those whose
    7N processes split its epoch, and 5 nodes are refused with the words the page quotes."""
    cfg = GRPOConfig.from_yaml("recipes/grpo_flux_t2is.yaml")
    runs = []
    for nodes in range(1, 17):
        try:
            EpochShape.from_config(cfg, 7 * nodes)
            runs.append(nodes)
        except EpochShapeError as err:
            if nodes == 5:
                refused = str(err)
    assert runs == [1, 2, 3, 4, 6, 8, 12, 16]
    words = "N = 1, 2, 3, 4, 6, 8, 12 or 16 nodes"
    assert words in " ".join(PAGE.read_text().split())
    assert "672 images per epoch do not split evenly over 35 processes" in refused
    assert EpochShape.from_config(cfg, 14).images_per_process == 48


def test_slurm_gives_the_launch_its_node_rank_and_nodes():
    """What the script runs on Slurm's second node of two (``DRY_RUN`` prints it): the
    paper's 7 + 1 layout, the job of 14, the node's own judge behind 127.0.0.1."""
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": "1",
        "MAIN_ADDR": "gpu-a",  # what the first host of SLURM_JOB_NODELIST gives, via scontrol
        "REWARD_MODEL": "runs/paco_reward_7b_lora/merged",
        "DRY_RUN": "1",
    }
    script = ROOT / "recipes" / "launch_multinode.sh"
    proc = subprocess.run(["bash", str(script), "recipes/grpo_flux_t2is.yaml", "--seed", "3"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    server, train = proc.stdout.splitlines()
    assert server.split()[1:] == [
        "env", "GPU=7", "PORT=8000", "SERVED_NAME=PaCo-Reward-7B", "SERVER=auto",
        "DTYPE=bfloat16", "DEVICE=", "bash", str(ROOT / "recipes" / "serve_rewards.sh"),
        "runs/paco_reward_7b_lora/merged",
    ]  # fmt: skip
    config = ROOT / "recipes" / "accelerate" / "multinode_7_train_1_reward.yaml"
    assert train.split()[1:] == [
        "accelerate", "launch", "--config_file", str(config), "--num_machines", "2",
        "--machine_rank", "1", "--num_processes", "14", "--gpu_ids", "0,1,2,3,4,5,6",
        "--main_process_ip", "gpu-a", "--main_process_port", "29500",
        "-m", "paco_grpo.cli", "train", "recipes/grpo_flux_t2is.yaml", "--seed", "3",
        "--reward_kwargs.consistency.server_url", "http://127.0.0.1:8000/v1",
        "--reward_kwargs.consistency.model", "PaCo-Reward-7B",
    ]  # fmt: skip
    # the sbatch example runs this very script once per node (one task per node)
    sbatch = (ROOT / "recipes" / "slurm" / "grpo_multinode.sbatch").read_text()
    assert 'srun --kill-on-bad-exit=1 bash recipes/launch_multinode.sh "$@"' in sbatch
    assert "#SBATCH --ntasks-per-node=1" in sbatch and "#SBATCH --gpus-per-node=8" in sbatch
    subprocess.run(["bash", "-n", "-c", sbatch], check=True)
