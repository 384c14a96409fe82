"""Describe-then-compare upper bound: a stand-in describes each panel of the truth test
pairs (greedy); score = -(number of differing clauses). usage: oracle_describe.py STANDIN"""
import sys, time, json
import numpy as np, torch
torch.set_num_threads(1)
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration
from paco_reward.testing.standin import DescribeCollator, IGNORE_INDEX, DESCRIBE_INSTRUCTION
from paco_reward.training.loading import load_pair_dataset_dict
from paco_reward.training.metrics import decision_metrics
path = sys.argv[1]; px = int(sys.argv[2]) if len(sys.argv) > 2 else 112
t0 = time.process_time()
model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
proc = AutoProcessor.from_pretrained(path)
col = DescribeCollator(proc, DESCRIBE_INSTRUCTION, px * px)
rows = load_pair_dataset_dict("outputs/exp/data144_s0/export/truth")["test"]
imgs = list(rows["image_a"]) + list(rows["image_b"])
gen = []
for s in range(0, len(imgs), 64):
    batch = col([(im, "") for im in imgs[s:s + 64]])
    width = int(batch["labels"].ne(IGNORE_INDEX).float().argmax(-1).min())
    inputs = {k: v[:, :width] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v for k, v in batch.items() if k != "labels"}
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=48, do_sample=False)
    gen += proc.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
n = len(rows)
cl = lambda t: [c.strip().lower() for c in t.strip().rstrip(".").split(",")]
diff = np.array([sum(x != y for x, y in zip(cl(gen[i]), cl(gen[n + i]))) + abs(len(cl(gen[i])) - len(cl(gen[n + i]))) for i in range(n)])
labels = np.array(rows["label"])
m = decision_metrics(1.0 / (1 + diff), labels)
print(gen[:3], rows["reasons"][:1])
print("diff counts yes", np.bincount(diff[labels == 1]), "no", np.bincount(diff[labels == 0]))
print("RESULT", json.dumps({"cpu": round(time.process_time() - t0), "acc_diff0": round(float(((diff == 0) == labels).mean()), 3), **{k: round(float(m[k]), 3) for k in ("score_accuracy", "roc_auc")}}))
