#!/bin/bash
# usage: ddp_exp.sh NAME BASE DATA [--key value ...]: the demo's SFT recipe (demo.stage_train.sft_recipe) on 2 processes, then truth/annot scores
set -e
name=$1; base=$2; data=$3; shift 3
out=outputs/exp/$name
.venv/bin/python - "$out" "$base" "$data" "$@" <<'PY'
import sys, yaml
from pathlib import Path
from demo.stage_train import sft_recipe
out, base, data, *over = sys.argv[1:]
kw = {over[i].lstrip("-"): yaml.safe_load(over[i + 1]) for i in range(0, len(over), 2)}
r = sft_recipe(Path(out), Path(base), Path(data), 0, **kw)
r["disable_tqdm"] = True
Path(out + ".yaml").write_text(yaml.safe_dump(r, sort_keys=False))
PY
start=$(date +%s)
OMP_NUM_THREADS=1 .venv/bin/python -m torch.distributed.run --standalone --nproc_per_node=2 -m paco_reward.cli train $out.yaml > $out.train.log 2>&1
echo "TRAIN_WALL $(( $(date +%s) - start ))"
ANNOT_DATA=outputs/exp/data144_s0/export .venv/bin/python outputs/exp/truth_scores.py $out
