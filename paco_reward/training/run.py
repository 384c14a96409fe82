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

__all__ = ["run_training"]


def run_training(config: PacoSFTConfig) -> dict[str, Any]:
    """Train as ``config`` says; save weights, processor, model card and the config itself
    (``training_config.yaml``) to ``output_dir`` (and ``output_dir/merged`` when
    ``save_merged``). Every process of a launch calls it; one writes the files.

    Returns:
        The final held-out metrics (empty without an evaluation split).
    """
    from paco_reward.launch import check_single_job
    from paco_reward.planning import check_plan
    from paco_reward.training.loading import build_trainer, model_init_kwargs
    from paco_reward.training.merge import merge_lora
    from paco_reward.training.model_card import recipe_dict, write_model_card
    from paco_reward.training.planning import plan_sft

    check_single_job(config.world_size)  # before the model loads
    sharded = bool(config.deepspeed) or getattr(config, "deepspeed_plugin", None) is not None
    main_process = config.process_index == 0
    check_plan(
        lambda gpu_gb: plan_sft(config, num_processes=config.world_size, gpu_memory_gb=gpu_gb,
                                sharded=sharded),
        config.device, skip=config.skip_plan_check, is_main_process=main_process,
    )  # fmt: skip
    output_dir = Path(config.output_dir)
    if main_process:  # before training, so a run that stops still says how it was launched
        config.to_yaml(output_dir / SAVED_CONFIG)
    trainer = build_trainer(config)
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    trainer.save_model(str(output_dir))
    metrics = trainer.evaluate() if trainer.eval_dataset is not None else {}
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
