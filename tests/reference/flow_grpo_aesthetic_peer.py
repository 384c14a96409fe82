"""Run Flow-GRPO's released aesthetic scorer (``flow_grpo/aesthetic_scorer.py``) on a tiny
CLIP and head: a script for a transformers 4 venv (the t2v-metrics one: its
``get_image_features`` returns the embedding tensor the scorer divides by its norm),
started by ``tests/reference/test_ref_aesthetics.py``; nothing of paco_reward is imported.

``--source`` holds the package folder ``flow_grpo/`` with ``aesthetic_scorer.py`` and the
head in ``assets/`` (the test lays it out in a temporary folder); the scorer's hard-coded
``openai/clip-vit-large-patch14`` is mapped to ``--clip``. The images go in as the released
``aesthetic_score`` reward passes them: a uint8 NCHW tensor. The raw ratings are printed as
JSON.
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--clip", required=True)
    parser.add_argument("--images", required=True, help="a .npy of uint8 NHWC images")
    args = parser.parse_args()

    import numpy as np
    import torch
    import transformers

    for cls in (transformers.CLIPModel, transformers.CLIPProcessor):
        original = cls.from_pretrained.__func__

        def redirected(klass, name, *a, _original=original, **k):
            name = args.clip if name == "openai/clip-vit-large-patch14" else name
            return _original(klass, name, *a, **k)

        cls.from_pretrained = classmethod(redirected)
    sys.path.insert(0, args.source)
    from flow_grpo.aesthetic_scorer import AestheticScorer

    torch.set_num_threads(1)
    images = torch.tensor(np.load(args.images).transpose(0, 3, 1, 2))  # NHWC -> NCHW
    scorer = AestheticScorer(dtype=torch.float32)
    print(json.dumps({"transformers": transformers.__version__,
                      "ratings": scorer(images).tolist()}))  # fmt: skip


if __name__ == "__main__":
    main()
