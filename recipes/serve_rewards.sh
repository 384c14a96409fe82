#!/usr/bin/env bash
# The reward GPU of the paper's layout: serve the merged PaCo evaluator on one GPU (default 7)
# behind an OpenAI-compatible API on 127.0.0.1, for the 7 training processes of
# recipes/accelerate/paper_7_train_1_reward.yaml (their `reward_kwargs.consistency.server_url`).
# On several nodes, recipes/launch_multinode.sh starts one on every node (docs/multinode.md).
#
#   bash recipes/serve_rewards.sh runs/paco_reward_7b_lora/merged        # GPU 7, port 8000
#   GPU=7 PORT=8000 SERVED_NAME=PaCo-Reward-7B bash recipes/serve_rewards.sh MERGED_FOLDER [SERVER FLAGS]
#
# Settings (environment): GPU (7), PORT (8000), SERVED_NAME (PaCo-Reward-7B), DTYPE (bfloat16),
# SERVER: auto (`vllm serve` when vLLM is installed, else `paco-reward serve`), vllm or paco;
# DEVICE: `paco-reward serve`'s torch device (default: the GPU; `cpu` on a machine without).
# Flags after the model go to the server as they are. CLIP-H, the CLIP-T reward's model
# (1 B parameters), is not served: it stays in each training process, on that process's GPU.
set -euo pipefail
MODEL=${1:?usage: bash recipes/serve_rewards.sh MERGED_MODEL_FOLDER_OR_HUB_ID [SERVER FLAGS]}
shift
GPU=${GPU:-7}
PORT=${PORT:-8000}
SERVED_NAME=${SERVED_NAME:-PaCo-Reward-7B}
DTYPE=${DTYPE:-bfloat16}
SERVER=${SERVER:-auto}
export CUDA_VISIBLE_DEVICES=$GPU
if [[ $SERVER == vllm || ($SERVER == auto && -n $(command -v vllm)) ]]; then
  exec vllm serve "$MODEL" --served-model-name "$SERVED_NAME" --host 127.0.0.1 --port "$PORT" \
    --dtype "$DTYPE" "$@"
fi
exec paco-reward serve "$MODEL" --served_model_name "$SERVED_NAME" --host 127.0.0.1 \
  --port "$PORT" --dtype "$DTYPE" ${DEVICE:+--device "$DEVICE"} "$@"
