"""``paco-eval t2is``: T2IS-Bench's stages and flags.

    paco-eval t2is all recipes/eval/t2is_flux_dev.yaml --prompts test_metadata.jsonl --lora runs/flux_t2is
    paco-eval t2is generate --prompts test_metadata.jsonl --images_dir out/images --lora runs/flux_t2is
    paco-eval t2is judge --data /path/to/T2IS-Bench --images_dir out/images --output_dir out/eval
    paco-eval t2is report --output_dir out/eval --data ChengyouJia/T2IS-Bench
"""

from __future__ import annotations

from dataclasses import dataclass

from paco_eval.registry import Benchmark
from paco_reward.command_line import config_field

__all__ = ["BENCHMARK", "T2ISConfig"]


@dataclass
class T2ISConfig:
    """Evaluate a generator on T2IS-Bench (generate, judge, report)."""

    data: str = config_field("ChengyouJia/T2IS-Bench",
                             help="Folder of the benchmark's files or its hub dataset id.")  # fmt: skip
    images_dir: str = config_field("", help="Folder of the images, <case_id>_<k:04d>.png.")
    output_dir: str = config_field("t2is_eval", help="Folder of the results files and the report.")
    cases: str = config_field("all", help="Cases: all, heldout (drops PaCo-RL's training cases), "
                              "a category name, or a comma-separated list of case ids.")  # fmt: skip
    exclude: list[str] = config_field(list, help="Case ids to leave out (repeatable).")
    mode: str = config_field("default", help="reference (the released code, quirks included) or default.")
    strict: bool = config_field(False, help="Fail on a missing sub-image (default: report it in the coverage).")
    image_ext: str = config_field(".png", help="reference mode: the extension the released script "
                                  "matches (its image_pattern, dot included).")  # fmt: skip
    consistency_judges: list[str] = config_field(
        lambda: ["qwen=Qwen/Qwen2.5-VL-7B-Instruct", "gemma=google/gemma-3-4b-it"],
        help="Consistency judges as NAME=SPEC, SPEC paco:<folder or hub id> (in-process) or "
        "server:<url>@<model> (served), the kind optional; the first gives Table 3's VC columns and Avg.")
    alignment: str = config_field("zhiqiulin/clip-flant5-xxl",
                                  help="VQAScore model (CLIP-FlanT5 folder or hub id), judge:NAME "
                                  "for the VQAScore formula over a consistency judge (not the paper's), "
                                  "or '' to skip.")  # fmt: skip
    alignment_tokenizer: str = config_field("", help="The VQAScore model's tokenizer (default google/flan-t5-xxl).")
    alignment_dtype: str = config_field("bfloat16", help="The VQAScore model's dtype (the reference's bfloat16).")
    aesthetics: str = config_field("openai/clip-vit-large-patch14",
                                   help="The LAION aesthetic predictor's CLIP (not the paper's unpublished "
                                   "model), or '' to skip.")  # fmt: skip
    aesthetics_head: str = config_field("", help="Its MLP head file (default: the released one on the hub).")
    resize: int = config_field(512, help="Side the released script asks qwen_vl_utils for (504 after rounding).")
    # generate
    prompts: str = config_field("", help="generate: PaCo-RL's T2IS metadata JSONL (dataset/T2IS/all/"
                                "test_metadata.jsonl of X-GenGroup/PaCo-RL; original_idx = case id, "
                                "prompt, height, width, layout): the grid prompts T2IS-Bench.json lacks.")  # fmt: skip
    pipeline: str = config_field("flux", help="generate: a registered text-to-image pipeline "
                                 "(paco_grpo.pipelines: flux, flux2, sd3, qwen_image, z_image, ...).")  # fmt: skip
    model_name_or_path: str = config_field("black-forest-labs/FLUX.1-dev",
                                           help="generate: the pipeline's weights (folder or hub id).")  # fmt: skip
    lora: str | None = config_field(None, help="generate: a LoRA file or folder, a paco-grpo checkpoint "
                                    "folder, or a GRPO run's output_dir (its latest checkpoint).")  # fmt: skip
    resolution: int = config_field(1024, help="generate: the side of a 2x2 grid (the paper's 1024); other "
                                   "layouts keep their case's 512-px panels scaled by resolution/1024.")  # fmt: skip
    grid_size: str = config_field("case", help="generate: case (each case's height x width, scaled) or "
                                  "square (resolution x resolution for every layout, as PaCo-RL's "
                                  "trainer tests).")  # fmt: skip
    guidance_scale: float = config_field(3.5, help="generate: guidance scale (the paper's 3.5).")
    num_inference_steps: int = config_field(20, help="generate: sampling steps (the paper's 20).")
    max_sequence_length: int = config_field(512, help="generate: text tokens of the prompt (where the pipeline takes it).")
    seed: int = config_field(0, help="generate: base seed; a case draws with seed + its number (0006_0012: 60012).")
    gen_dtype: str | None = config_field(None, help="generate: the generator's dtype (default bfloat16 on "
                                         "CUDA, float32 on CPU).")  # fmt: skip
    device: str | None = config_field(None, help="Device of the generator and in-process judges "
                                      "(default: this process's, one per process under accelerate launch).")  # fmt: skip
    dtype: str | None = config_field(None, help="Judges' dtype (default bfloat16 on CUDA, float32 on CPU).")
    batch_size: int = config_field(8, help="Pairs per judge forward.")
    gpu_memory_gb: float | None = config_field(None, help="plan: the GPU's memory to check each step against.")

def _plan(config: T2ISConfig) -> int:
    from paco_eval.t2is.plan import run_plan

    return run_plan(config)


def _generate(config: T2ISConfig) -> int:
    from paco_eval.t2is.generate import run_generate

    return run_generate(config)


def _judge(config: T2ISConfig) -> int:
    from paco_eval.t2is.stages import run_judge

    return run_judge(config)


def _report(config: T2ISConfig) -> int:
    from paco_eval.t2is.stages import run_report

    return run_report(config)


BENCHMARK = Benchmark(
    name="t2is",
    help="T2IS-Bench: visual consistency, prompt alignment and aesthetics of image sets.",
    config_cls=T2ISConfig,
    stages={"plan": _plan, "generate": _generate, "judge": _judge, "report": _report},
    recipe="optional",  # recipes/eval/t2is_flux_dev.yaml holds the paper's settings
)
