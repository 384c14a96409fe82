"""Supervised fine-tuning of the PaCo pairwise evaluator.

>>> from paco_reward.training import PacoSFTConfig, build_trainer, run_training  # doctest: +SKIP
>>> trainer = build_trainer(PacoSFTConfig(output_dir="out",
...     model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct", dataset_path="pairs/"))  # doctest: +SKIP
>>> trainer.train()                                                    # doctest: +SKIP
>>> run_training(PacoSFTConfig.from_yaml("recipes/tiny_cpu.yaml"))    # doctest: +SKIP
"""

from paco_reward.training.collator import PacoSFTCollator, format_reasoning_first
from paco_reward.training.loading import build_trainer, load_model_and_processor, lora_config
from paco_reward.training.loss import first_token_weighted_loss
from paco_reward.training.metrics import decision_metrics, roc_auc
from paco_reward.training.run import run_training
from paco_reward.training.sft_config import PacoSFTConfig
from paco_reward.training.sft_trainer import PacoSFTTrainer

__all__ = [
    "PacoSFTCollator",
    "PacoSFTConfig",
    "PacoSFTTrainer",
    "build_trainer",
    "decision_metrics",
    "first_token_weighted_loss",
    "format_reasoning_first",
    "load_model_and_processor",
    "lora_config",
    "roc_auc",
    "run_training",
]
