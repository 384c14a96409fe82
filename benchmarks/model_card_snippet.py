"""The PaCo-Reward model card's scoring snippet, kept verbatim in spirit as a baseline.

One pair at a time: chat template → ``qwen_vl_utils.process_vision_info`` →
processor → forward → sigmoid(logit("Yes") − logit("No")) of the first answer
token. The parity test checks ``PacoReward(canonical_yes_no=False)`` against it;
``benchmarks/throughput.py`` times it against the batched API.
"""

from __future__ import annotations

import torch
from qwen_vl_utils import process_vision_info


class ModelCardScorer:
    """``ModelCardScorer(model, processor).score(image_a, image_b, instruction)``."""

    def __init__(self, model, processor) -> None:
        self.model = model.eval()
        self.processor = processor
        self.yes_id = processor.tokenizer.convert_tokens_to_ids("Yes")
        self.no_id = processor.tokenizer.convert_tokens_to_ids("No")

    @torch.no_grad()
    def score(self, image_a, image_b, instruction: str) -> float:
        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": image_a},
                    {"type": "image", "image": image_b},
                    {"type": "text", "text": instruction},
                ],
            }
        ]
        text = self.processor.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        image_inputs, video_inputs = process_vision_info(messages)
        inputs = self.processor(
            text=[text], images=image_inputs, videos=video_inputs, padding=True, return_tensors="pt"
        ).to(self.model.device)
        logits = self.model(**inputs).logits[0, -1]
        return torch.sigmoid(logits[self.yes_id] - logits[self.no_id]).item()
