"""usage: clean_labels.py EXPORT OUT: DIAGNOSTIC ONLY (uses ground truth the pipeline does not have):
the export with train Yes pairs whose reasons name >= 2 differing attributes removed; truth/ linked."""
import sys, os
from pathlib import Path
from paco_reward.training.loading import load_pair_dataset_dict
src, out = Path(sys.argv[1]), Path(sys.argv[2])
d = load_pair_dataset_dict(src)
keep = [i for i, (r, l) in enumerate(zip(d["train"]["reasons"], d["train"]["label"])) if not (l == 1 and r.count(" different") >= 2)]
d["train"] = d["train"].select(keep)
d.save_to_disk(str(out / "hf"))
if not (out / "truth").exists():
    os.symlink(src / "truth", out / "truth")
print("train rows", len(keep), "yes", sum(d["train"]["label"]))
