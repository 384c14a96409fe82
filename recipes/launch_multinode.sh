#!/usr/bin/env bash
# PaCo-GRPO on N nodes in the paper's layout, run once on every node (docs/multinode.md). It
# starts this node's reward server on the node's reward GPU (GPU 7) behind 127.0.0.1, waits
# until it answers, runs this node's share of one accelerate job (7 training processes on
# GPUs 0-6, every one scoring on this node's server only), and stops the server at the end.
#
#   NUM_NODES=2 NODE_RANK=R MAIN_ADDR=node0 REWARD_MODEL=runs/paco_reward_7b_lora/merged \
#       bash recipes/launch_multinode.sh recipes/grpo_flux_t2is.yaml [--flag value ...]
#   sbatch recipes/slurm/grpo_multinode.sbatch recipes/grpo_flux_t2is.yaml    # Slurm sets the rest
#
# Settings (environment; the defaults in brackets):
#   NUM_NODES        nodes of the job [SLURM_JOB_NUM_NODES, else 1]
#   NODE_RANK        this node, 0 .. NUM_NODES-1 [SLURM_NODEID, else 0]
#   MAIN_ADDR        node 0's address, reachable from every node [first host of
#                    SLURM_JOB_NODELIST, else 127.0.0.1]
#   MAIN_PORT        node 0's rendezvous port [29500]
#   PROCS_PER_NODE   training processes per node [7], on TRAIN_GPUS [0 .. PROCS_PER_NODE-1]
#   REWARD_GPU       the node's reward GPU [PROCS_PER_NODE: GPU 7]
#   REWARD_MODEL     the judge to serve: a merged model folder or hub id (required)
#   REWARD_NAME      the recipe's reward it answers [consistency]; the script points that
#                    reward at http://127.0.0.1:REWARD_PORT/v1 under SERVED_NAME
#   SERVED_NAME      [PaCo-Reward-7B]     REWARD_PORT [8000]
#   REWARD_SERVER    auto, vllm or paco [auto]; REWARD_DTYPE [bfloat16]; REWARD_DEVICE
#                    (paco-reward serve's device) [the reward GPU]; see recipes/serve_rewards.sh
#   REWARD_TIMEOUT   seconds to wait for the server's /health [1200]
#   REWARD_LOG       the server's output [reward_server[.SLURM_JOB_ID].node<NODE_RANK>.log]
#   ACCELERATE_CONFIG  [recipes/accelerate/multinode_7_train_1_reward.yaml]
#   TRAIN_PROGRAM    what every process runs, before the recipe [-m paco_grpo.cli train]; a
#                    script of your own that takes the recipe and flags the same way
#   DRY_RUN=1        print the server and training commands instead of running them
# On CPUs (docs/multinode.md runs two nodes on one machine): ACCELERATE_USE_CPU=1
# REWARD_SERVER=paco REWARD_DEVICE=cpu REWARD_DTYPE=float32, a port per node.
set -euo pipefail
RECIPE=${1:?usage: bash recipes/launch_multinode.sh RECIPE [--flag value ...] (settings: see its top)}
shift
RECIPES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

NUM_NODES=${NUM_NODES:-${SLURM_JOB_NUM_NODES:-1}}
NODE_RANK=${NODE_RANK:-${SLURM_NODEID:-0}}
if [[ -z ${MAIN_ADDR:-} && -n ${SLURM_JOB_NODELIST:-} ]]; then
  MAIN_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
fi
MAIN_ADDR=${MAIN_ADDR:-127.0.0.1}
MAIN_PORT=${MAIN_PORT:-29500}
PROCS_PER_NODE=${PROCS_PER_NODE:-7}
TRAIN_GPUS=${TRAIN_GPUS:-$(seq -s, 0 $((PROCS_PER_NODE - 1)))}
REWARD_GPU=${REWARD_GPU:-$PROCS_PER_NODE}
REWARD_MODEL=${REWARD_MODEL:?set REWARD_MODEL to the judge to serve (a merged model folder or hub id)}
REWARD_NAME=${REWARD_NAME:-consistency}
SERVED_NAME=${SERVED_NAME:-PaCo-Reward-7B}
REWARD_PORT=${REWARD_PORT:-8000}
REWARD_TIMEOUT=${REWARD_TIMEOUT:-1200}
REWARD_LOG=${REWARD_LOG:-reward_server${SLURM_JOB_ID:+.$SLURM_JOB_ID}.node$NODE_RANK.log}
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-$RECIPES/accelerate/multinode_7_train_1_reward.yaml}
read -ra PROGRAM <<<"${TRAIN_PROGRAM:--m paco_grpo.cli train}"
SERVER_URL=http://127.0.0.1:$REWARD_PORT/v1

# The node's judge, node-local: bound to 127.0.0.1, so no other node's process can reach it.
SERVER=(env GPU="$REWARD_GPU" PORT="$REWARD_PORT" SERVED_NAME="$SERVED_NAME"
  SERVER="${REWARD_SERVER:-auto}" DTYPE="${REWARD_DTYPE:-bfloat16}" DEVICE="${REWARD_DEVICE:-}"
  bash "$RECIPES/serve_rewards.sh" "$REWARD_MODEL")
# This node's share of the one job; the recipe's reward scores on this node's server (an
# entry flag after the user's flags wins over a whole --reward_kwargs among them).
TRAIN=(accelerate launch --config_file "$ACCELERATE_CONFIG"
  --num_machines "$NUM_NODES" --machine_rank "$NODE_RANK"
  --num_processes $((NUM_NODES * PROCS_PER_NODE)) --gpu_ids "$TRAIN_GPUS"
  --main_process_ip "$MAIN_ADDR" --main_process_port "$MAIN_PORT"
  "${PROGRAM[@]}" "$RECIPE" "$@"
  --reward_kwargs."$REWARD_NAME".server_url "$SERVER_URL"
  --reward_kwargs."$REWARD_NAME".model "$SERVED_NAME")

if [[ -n ${DRY_RUN:-} ]]; then
  printf 'server: %s\ntrain: %s\n' "${SERVER[*]}" "${TRAIN[*]}"
  exit 0
fi

echo "node $NODE_RANK of $NUM_NODES: reward server on GPU $REWARD_GPU at $SERVER_URL (log: $REWARD_LOG)"
"${SERVER[@]}" >"$REWARD_LOG" 2>&1 &
SERVER_PID=$!
stop_server() { kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; }
trap stop_server EXIT  # the training's exit status stays the script's
trap 'exit 143' TERM INT

deadline=$((SECONDS + REWARD_TIMEOUT))
until python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
  "http://127.0.0.1:$REWARD_PORT/health" 2>/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "the reward server exited before answering; its log, $REWARD_LOG:" >&2
    tail -n 20 "$REWARD_LOG" >&2
    exit 1
  fi
  if ((SECONDS > deadline)); then
    echo "the reward server did not answer at $SERVER_URL within ${REWARD_TIMEOUT}s (REWARD_TIMEOUT); see $REWARD_LOG" >&2
    exit 1
  fi
  sleep 1
done

echo "node $NODE_RANK of $NUM_NODES: $PROCS_PER_NODE training processes on GPUs $TRAIN_GPUS, job of $((NUM_NODES * PROCS_PER_NODE)) (main: $MAIN_ADDR:$MAIN_PORT)"
"${TRAIN[@]}"
