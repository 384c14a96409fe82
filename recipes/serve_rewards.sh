#!/usr/bin/env bash
# The reward GPU of the paper's layout: serve the merged PaCo evaluator on one GPU (default 7)
# behind an OpenAI-compatible API, for the 7 training processes of
# recipes/accelerate/paper_7_train_1_reward.yaml (their `reward_kwargs.consistency.server_url`).
#
#   bash recipes/serve_rewards.sh runs/paco_reward_7b_lora/merged        # GPU 7, port 8000
#   GPU=7 PORT=8000 SERVED_NAME=PaCo-Reward-7B bash recipes/serve_rewards.sh MERGED_FOLDER
#
# Uses `vllm serve` when vLLM is installed, else `paco-reward serve` (transformers). CLIP-H,
# the CLIP-T reward's model (1 B parameters), is not served: it stays in each training
# process, on that process's GPU.
set -euo pipefail
MODEL=${1:?usage: bash recipes/serve_rewards.sh MERGED_MODEL_FOLDER_OR_HUB_ID}
GPU=${GPU:-7}
PORT=${PORT:-8000}
SERVED_NAME=${SERVED_NAME:-PaCo-Reward-7B}
export CUDA_VISIBLE_DEVICES=$GPU
if command -v vllm >/dev/null 2>&1; then
  exec vllm serve "$MODEL" --served-model-name "$SERVED_NAME" --host 127.0.0.1 --port "$PORT" \
    --dtype bfloat16
fi
exec paco-reward serve "$MODEL" --served_model_name "$SERVED_NAME" --host 127.0.0.1 \
  --port "$PORT" --dtype bfloat16
