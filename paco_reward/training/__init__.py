"""Supervised fine-tuning of the PaCo pairwise evaluator.

>>> from paco_reward.training import PacoSFTConfig, PacoSFTTrainer   # doctest: +SKIP
>>> trainer = PacoSFTTrainer(args=PacoSFTConfig(output_dir="out",
...     model_name_or_path="Qwen/Qwen2.5-VL-7B-Instruct", dataset_path="pairs/"))  # doctest: +SKIP
>>> trainer.train()                                                    # doctest: +SKIP
"""

from paco_reward.training.collator import PacoSFTCollator, format_reasoning_first
from paco_reward.training.loss import first_token_weighted_loss
from paco_reward.training.metrics import decision_metrics, roc_auc
from paco_reward.training.sft_config import PacoSFTConfig
from paco_reward.training.sft_trainer import PacoSFTTrainer

__all__ = [
    "PacoSFTCollator",
    "PacoSFTConfig",
    "PacoSFTTrainer",
    "decision_metrics",
    "first_token_weighted_loss",
    "format_reasoning_first",
    "roc_auc",
]
