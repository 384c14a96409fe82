"""How far the planner's activation estimate is from measured memory.

The planner (``paco-grpo plan``) estimates a training micro-batch's activations from a
forward on the meta device (:func:`paco_grpo.planning.transformer_activation_bytes`). This
benchmark runs the same architecture for real, at reduced width on the CPU in float32,
and measures the peak of the memory torch allocates during one forward + backward
(torch's profiler records every allocation with the running total), minus what was held
before. The LoRA gradients are allocated in that window too, so they are added to the
estimate as the plan adds them. Two sizes, with and without gradient checkpointing::

    python -m benchmarks.plan_calibration            # table; --json PATH writes it too

Each row's error is (estimate - measured) / measured.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from paco_reward.command_line import Command, config_field, run_cli

# (heads, micro-batch, resolution, text tokens) of the two sizes; head width 64, 2 double
# and 4 single blocks, FLUX.1-dev's in/out channels and block structure.
SIZES = [(2, 1, 256, 64), (4, 2, 384, 128)]


@dataclass
class CalibrationArguments:
    """Planner's activation estimate vs measured peak memory, at reduced width on CPU."""

    lora_r: int = config_field(8, help="LoRA rank of the runs.")
    json: str | None = config_field(None, help="Also write the rows as JSON here.")


def reduced_flux(heads: int) -> dict:
    """FLUX.1-dev's transformer config with ``heads`` heads of width 64 and 2 + 4 blocks."""
    from paco_grpo.architectures import pipeline_configs

    config = dict(pipeline_configs("black-forest-labs/FLUX.1-dev")["transformer"])
    config.update(
        num_attention_heads=heads, attention_head_dim=64, axes_dims_rope=[16, 24, 24],
        num_layers=2, num_single_layers=4, joint_attention_dim=256, pooled_projection_dim=64,
    )  # fmt: skip
    return config


def measured_peak_bytes(step) -> int:
    """Peak bytes torch allocates on the CPU while ``step()`` runs, above what it held before."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()

    def walk(nodes):
        for node in nodes:
            yield node
            yield from walk(node.children)

    events = [
        n.extra_fields
        for n in walk(prof.profiler.kineto_results.experimental_event_tree())
        if n.tag == _EventType.Allocation
    ]
    if not events:
        raise RuntimeError("the profiler recorded no allocation")
    first = min(events, key=lambda e: e.total_allocated - e.alloc_size)
    held_before = first.total_allocated - first.alloc_size
    return max(e.total_allocated for e in events) - held_before


def calibrate(lora_r: int = 8) -> list[dict]:
    """One row per size and checkpointing: estimate, measured peak, relative error."""
    import diffusers
    import torch
    from peft import LoraConfig

    from paco_grpo.pipelines.flux import FLUX_LORA_TARGETS
    from paco_grpo.planning import transformer_activation_bytes

    rows = []
    for heads, batch, resolution, text in SIZES:
        config = reduced_flux(heads)
        for checkpointing in (False, True):
            torch.manual_seed(0)
            model = diffusers.FluxTransformer2DModel.from_config(
                {k: v for k, v in config.items() if not k.startswith("_")}
            )
            model.requires_grad_(False)
            model.add_adapter(
                LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules=list(FLUX_LORA_TARGETS))
            )
            if checkpointing:
                model.enable_gradient_checkpointing()
            model.train()
            tokens = (resolution // 16) ** 2
            inputs = dict(
                hidden_states=torch.randn(batch, tokens, config["in_channels"]),
                encoder_hidden_states=torch.randn(batch, text, config["joint_attention_dim"]),
                pooled_projections=torch.randn(batch, config["pooled_projection_dim"]),
                timestep=torch.rand(batch),
                guidance=torch.full((batch,), 3.5),
                img_ids=torch.zeros(tokens, 3),
                txt_ids=torch.zeros(text, 3),
            )  # fmt: skip

            def step(model=model, inputs=inputs):
                out = model(**inputs, return_dict=False)[0]
                out.pow(2).mean().backward()

            measured = measured_peak_bytes(step)
            lora_grads = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
            estimate = lora_grads + transformer_activation_bytes(
                config, pipeline="flux", batch_size=batch, resolution=resolution, text_tokens=text,
                lora_r=lora_r, gradient_checkpointing=checkpointing, dtype=torch.float32,
            )  # fmt: skip
            rows.append(
                {
                    "heads": heads,
                    "micro_batch": batch,
                    "resolution": resolution,
                    "tokens": tokens + text,
                    "gradient_checkpointing": checkpointing,
                    "measured_mib": measured / 2**20,
                    "estimate_mib": estimate / 2**20,
                    "error": (estimate - measured) / measured,
                }
            )
    return rows


def run(args: CalibrationArguments) -> int:
    rows = calibrate(args.lora_r)
    print(
        "| width | micro-batch | resolution | tokens | checkpointing | measured MiB | estimate MiB | error |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['heads'] * 64} | {r['micro_batch']} | {r['resolution']}^2 | {r['tokens']} | "
            f"{'on' if r['gradient_checkpointing'] else 'off'} | {r['measured_mib']:.1f} | "
            f"{r['estimate_mib']:.1f} | {100 * r['error']:+.1f} % |"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)
    return 0


def main(argv: list[str] | None = None) -> int:
    command = Command("plan-calibration", CalibrationArguments, run, CalibrationArguments.__doc__)
    return run_cli(
        "python -m benchmarks.plan_calibration", __doc__.splitlines()[0], [command], argv
    )


if __name__ == "__main__":
    sys.exit(main())
