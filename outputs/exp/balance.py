"""usage: balance.py SRC DST: train split with as many Yes as No rows (Yes downsampled, seed 0)."""
import sys, shutil, random
from pathlib import Path
from paco_reward.training.loading import load_pair_dataset_dict
src, dst = sys.argv[1:3]
ds = load_pair_dataset_dict(src)
train = ds["train"]
yes = [i for i, l in enumerate(train["label"]) if l == 1]
no = [i for i, l in enumerate(train["label"]) if l == 0]
keep = sorted(random.Random(0).sample(yes, len(no)) + no)
ds["train"] = train.select(keep)
print(len(yes), len(no), "->", len(keep))
ds.save_to_disk(str(Path(dst) / "hf"))
if (Path(src) / "truth").exists():
    shutil.copytree(Path(src) / "truth", Path(dst) / "truth", dirs_exist_ok=True)
