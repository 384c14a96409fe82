"""Peer check: the LLaMA-Factory route of ``docs/dataset.md``, run by LLaMA-Factory itself.

Builds the tiny Qwen2.5-VL and a small synthetic export, trains a few LoRA steps with the
real ``llamafactory-cli`` on ``recipes/llamafactory/paco_reward_lora.yaml`` (tiny-scale
overrides on the command line), keeps LLaMA-Factory's tokenized dataset and checks that every
prompt it built is token for token the prompt our scorer renders (``render_prompt_ids``;
image pads compared collapsed, their count depends on each side's pixel budget) and every
supervised span is our answer. ``make llamafactory-check`` builds LLaMA-Factory's own venv
and runs this.

    python -m benchmarks.llamafactory_peer --llamafactory .venv-llamafactory/bin/llamafactory-cli
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from paco_reward.command_line import Command, config_field, run_cli

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "llamafactory" / "paco_reward_lora.yaml"


def collapse_pads(ids: list[int], pad: int) -> list[int]:
    return [t for k, t in enumerate(ids) if not (t == pad and k and ids[k - 1] == pad)]


@dataclass
class PeerArguments:
    """Peer check: LLaMA-Factory trains on our export and tokenizes as our scorer does."""

    llamafactory: str = config_field(help="Path of llamafactory-cli.")
    steps: int = config_field(3, help="Training steps.")


def run(args: PeerArguments) -> int:
    """Train with LLaMA-Factory on a tiny export and compare its tokens with ours."""

    from datasets import load_from_disk
    from transformers import AutoProcessor

    from data_pipeline.pipeline import SyntheticConfig, run_synthetic
    from paco_reward.local_backend import render_prompt_ids
    from paco_reward.testing import build_tiny_qwen2_5_vl

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_qwen2_5_vl(tmp / "tiny", seed=0)
        run_synthetic(tmp / "work", SyntheticConfig(n_prompts=6, seed=1))
        export = tmp / "work" / "export" / "llamafactory"
        overrides = {
            "model_name_or_path": model,
            "dataset_dir": export,
            "output_dir": tmp / "out",
            "tokenized_path": tmp / "tokenized",
            "bf16": "false",
            "max_steps": args.steps,
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1,
        }
        command = [args.llamafactory, "train", str(RECIPE)]
        command += [f"{k}={v}" for k, v in overrides.items()]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "DISABLE_VERSION_CHECK": "1"}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode:
            print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
            raise RuntimeError(f"{args.llamafactory} train failed (exit {done.returncode}).")
        loss = [line for line in done.stdout.splitlines() if "train_loss" in line]
        tokenized = load_from_disk(str(tmp / "tokenized"))["train"]
        processor = AutoProcessor.from_pretrained(model)
        pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        records = json.loads((export / "paco_train.json").read_text())
        prompts_equal = answers_equal = 0
        for row, record in zip(tokenized, records):
            prompt = [t for t, lab in zip(row["input_ids"], row["labels"]) if lab == -100]
            answer = [t for t, lab in zip(row["input_ids"], row["labels"]) if lab != -100]
            instruction = record["messages"][0]["content"].replace("<image>", "")
            prompts_equal += collapse_pads(prompt, pad) == render_prompt_ids(processor, instruction)
            target = record["messages"][1]["content"] + "<|im_end|>"
            answers_equal += answer[: len(ours := processor.tokenizer.encode(target))] == ours
        n = len(tokenized)
        print(
            f"LLaMA-Factory trained {args.steps} steps on the export ({loss[-1].strip() if loss else ''})"
        )
        print(
            f"prompts identical to ours: {prompts_equal}/{n}; answers identical: {answers_equal}/{n}"
        )
        if not prompts_equal == answers_equal == n == len(records):
            raise RuntimeError(
                f"LLaMA-Factory's tokens differ from ours: prompts {prompts_equal}/{n}, answers "
                f"{answers_equal}/{n}, of {len(records)} exported records."
            )
        return 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    command = Command("llamafactory-peer", PeerArguments, run, "Peer-check the export.")
    return run_cli(
        "python -m benchmarks.llamafactory_peer", __doc__.splitlines()[0], [command], argv
    )


if __name__ == "__main__":
    sys.exit(main())
