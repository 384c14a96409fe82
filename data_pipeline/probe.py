"""A label-leakage probe for an exported pair dataset.

A consistency label should need *both* images. This probe fits tiny logistic
regressions on colour histograms of the train split and reports test ROC-AUC for
features of image A alone, image B alone, and the pair (|hist A - hist B|), plus the
AUC of the raw histogram distance. A single-image AUC well above 0.5 means the label
can be guessed without comparing (e.g. bad images always ranked last); a pair AUC near
0.5 means colour alone does not separate the labels.

    >>> report = leakage_probe("work/export/hf")      # doctest: +SKIP
    >>> report["image_b_only_auc"] < 0.6               # doctest: +SKIP
    True
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from data_pipeline.storage import DataPipelineError
from paco_reward.metrics import roc_auc

logger = logging.getLogger(__name__)


def colour_histogram(image, bins: int = 4, size: int = 32) -> np.ndarray:
    """Normalised joint RGB histogram (``bins**3`` values) of an image resized to ``size``."""
    array = np.asarray(image.convert("RGB").resize((size, size))) // (256 // bins)
    index = (array[..., 0] * bins + array[..., 1]) * bins + array[..., 2]
    return np.bincount(index.ravel(), minlength=bins**3) / (size * size)


def _fit_logistic(
    x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 2000, lr: float = 0.5
):
    x = np.c_[x, np.ones(len(x))]
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-x @ w))
        w -= lr * (x.T @ (p - y) / len(y) + l2 * w)
    return lambda z: np.c_[z, np.ones(len(z))] @ w


def leakage_probe(dataset_dir: str | Path, bins: int = 4, scale: float = 10.0) -> dict:
    """Probe ``dataset_dir`` (a saved DatasetDict with ``train`` and ``test``).

    Returns:
        ``{"pair_distance_auc", "pair_features_auc", "image_a_only_auc",
        "image_b_only_auc", "train_rows", "test_rows"}`` (test-split AUCs).

    Raises:
        DataPipelineError: a split is missing or empty.
    """
    from datasets import load_from_disk

    dataset = load_from_disk(str(dataset_dir))
    features = {}
    for split in ("train", "test"):
        if split not in dataset or len(dataset[split]) == 0:
            raise DataPipelineError(f"{dataset_dir}: needs a non-empty {split!r} split to probe.")
        ds = dataset[split]
        a = np.stack([colour_histogram(im, bins) for im in ds["image_a"]]) * scale
        b = np.stack([colour_histogram(im, bins) for im in ds["image_b"]]) * scale
        features[split] = (a, b, np.asarray(ds["label"], dtype=float))
    (a_tr, b_tr, y_tr), (a_te, b_te, y_te) = features["train"], features["test"]
    report = {
        "train_rows": len(y_tr),
        "test_rows": len(y_te),
        "pair_distance_auc": roc_auc(-np.abs(a_te - b_te).sum(1), y_te),
    }
    for name, (x_tr, x_te) in {
        "pair_features_auc": (np.abs(a_tr - b_tr), np.abs(a_te - b_te)),
        "image_a_only_auc": (a_tr, a_te),
        "image_b_only_auc": (b_tr, b_te),
    }.items():
        report[name] = roc_auc(_fit_logistic(x_tr, y_tr)(x_te), y_te)
    logger.info("leakage probe of %s: %s", dataset_dir, report)
    return report
