"""One SFT run, start to finish: what ``paco-reward train RECIPE`` does.

:func:`run_training` checks the launch and the plan before the model loads, saves the config
(``training_config.yaml``, which reloads with :meth:`PacoSFTConfig.from_yaml`), builds the
trainer (:func:`~paco_reward.training.loading.build_trainer`), trains, saves the weights,
the processor and a model card, evaluates, and merges a LoRA adapter into its base when
``save_merged`` says so.

    >>> from paco_reward.training import PacoSFTConfig, run_training
    >>> metrics = run_training(PacoSFTConfig.from_yaml("recipes/tiny_cpu.yaml"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paco_reward.training.sft_config import PacoSFTConfig
from paco_reward.yaml_config import SAVED_CONFIG

__all__ = ["check_sft_output_dir", "final_evaluation", "run_training"]


def final_evaluation(trainer) -> dict[str, Any]:
    """The held-out metrics of the trained weights: the evaluation the trainer ran at its last
    step (transformers evaluates there under ``eval_strategy: steps``), or a new one when
    there was none or ``load_best_model_at_end`` loaded other weights since."""
    history = trainer.state.log_history
    last = next((row for row in reversed(history) if "eval_loss" in row), None)
    if (
        last is not None
        and last.get("step") == trainer.state.global_step
        and not trainer.args.load_best_model_at_end
    ):
        return {k: v for k, v in last.items() if k != "step"}
    return trainer.evaluate()


def check_sft_output_dir(config: PacoSFTConfig, is_main_process: bool = True) -> str:
    """Refuse an ``output_dir`` that holds another run's checkpoints or metrics
    (:func:`paco_reward.output_dirs.check_config_output_dir`): transformers' rotation would delete
    that run's checkpoints and ``metrics.jsonl`` would mix both. ``overwrite_output_dir``
    deletes them (on the main process); a resume or the folder's own saved config may use
    the folder. Returns how it is used (``"new"``, ``"resume"``, ``"same"``, ...)."""
    from paco_reward.output_dirs import check_config_output_dir
    from paco_reward.training.callbacks import METRICS_FILE, PLOT_FILE

    return check_config_output_dir(
        config,
        markers=["checkpoint-*", METRICS_FILE],
        outputs=["checkpoint-*", METRICS_FILE, PLOT_FILE, "final_metrics.json"],
        what="training run",
        is_main_process=is_main_process,
    )


def run_training(config: PacoSFTConfig) -> dict[str, Any]:
    """Train as ``config`` says; save weights, processor, model card and the config itself
    (``training_config.yaml``) to ``output_dir`` (and ``output_dir/merged`` when
    ``save_merged``). Every process of a launch calls it; one writes the files.

    Returns:
        The final held-out metrics (empty without an evaluation split).
    """
    from paco_reward.launch import check_single_job
    from paco_reward.planning import check_plan
    from paco_reward.training.loading import (
        build_or_locate_model,
        build_trainer,
        model_init_kwargs,
    )
    from paco_reward.training.merge import merge_lora
    from paco_reward.training.model_card import recipe_dict, write_model_card
    from paco_reward.training.planning import plan_sft

    check_single_job(config.world_size)  # before the model loads
    if config.tiny_model:  # built first, so the plan reads its config (not "No memory plan")
        build_or_locate_model(config)
    sharded = bool(config.deepspeed) or getattr(config, "deepspeed_plugin", None) is not None
    main_process = config.process_index == 0
    check_plan(
        lambda gpu_gb: plan_sft(config, num_processes=config.world_size, gpu_memory_gb=gpu_gb,
                                sharded=sharded),
        config.device, skip=config.skip_plan_check, is_main_process=main_process,
    )  # fmt: skip
    output_dir = Path(config.output_dir)
    with config.main_process_first(desc="output_dir check"):  # the main one deletes first
        check_sft_output_dir(config, main_process)
    if main_process:  # before training, so a run that stops still says how it was launched
        config.to_yaml(output_dir / SAVED_CONFIG)
    trainer = build_trainer(config)
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    trainer.save_model(str(output_dir))
    metrics = final_evaluation(trainer) if trainer.eval_dataset is not None else {}
    # Every process trains and evaluates (collectives); one writes the files.
    if not trainer.is_world_process_zero():
        return metrics
    trainer.processing_class.save_pretrained(str(output_dir))
    data = {
        "dataset": config.dataset_path,
        "train rows": len(trainer.train_dataset),
        "eval rows": len(trainer.eval_dataset) if trainer.eval_dataset is not None else 0,
    }
    write_model_card(
        output_dir,
        base_model=config.model_name_or_path,
        recipe=recipe_dict(config),
        metrics=metrics,
        data=data,
        adapter=str(output_dir) if config.use_lora else None,
        model_path=str(output_dir),
    )
    (output_dir / "final_metrics.json").write_text(json.dumps(metrics, indent=2))
    if config.use_lora and config.save_merged:  # onto the revision the adapter trained on
        hub = model_init_kwargs(config)[1]
        merge_lora(config.model_name_or_path, output_dir, output_dir / "merged", **hub)
    return metrics
