#!/usr/bin/env bash
# The reward GPU of the paper's layout: the merged PaCo evaluator, or several judges behind one
# port (the PaCo-GRPO guide's "unified port with multiple models"), behind an OpenAI-compatible
# API on 127.0.0.1 for the 7 training processes of recipes/accelerate/paper_7_train_1_reward.yaml
# (their `reward_kwargs.<reward>.server_url`; a request's `model` picks the judge). On several
# nodes, recipes/launch_multinode.sh starts one on every node (docs/multinode.md).
#
#   bash recipes/serve_rewards.sh runs/paco_reward_7b_lora/merged        # GPU 7, port 8000
#   GPU=7 PORT=8000 SERVED_NAME=PaCo-Reward-7B bash recipes/serve_rewards.sh MERGED_FOLDER [SERVER FLAGS]
#   MODEL_PATHS="X-GenGroup/PaCo-Reward-7B,google/gemma-3-4b-it" \
#     MODEL_NAMES="PaCo-Reward-7B,Gemma-3-4B-IT" GPUS=7 PORT=8000 bash recipes/serve_rewards.sh
#
# With vLLM (SERVER=vllm; auto picks it when installed) each model gets a vLLM server of its own
# on its GPU and on the next ports (UPSTREAM_PORTS, default PORT+1, PORT+2, ...), and
# `paco-reward gateway` holds PORT in front of them (one model: vLLM on PORT itself). Else
# (SERVER=paco) one `paco-reward serve` process holds every model, each on its device. Flags
# after the model (every argument when MODEL_PATHS names the models) go to each server as they
# are. Ctrl-C or SIGTERM stops every server this script started, and so does any one exiting.
#
# Settings (environment; the guide's VLLM_MODEL_PATHS, VLLM_MODEL_NAMES and VLLM_PORT work too):
#   MODEL_PATHS  comma-separated folders or hub ids, instead of the MODEL argument
#   MODEL_NAMES  the name of each, as the recipes ask for it; several models need it (one
#                model: SERVED_NAME [PaCo-Reward-7B])
#   GPUS         one GPU per model, or one that every model shares [GPU: 7]; empty: no GPU
#                pinning (the engine's default device, e.g. a CPU)
#   DEVICE       paco-reward serve's torch device, one or one per model [cuda:<the model's GPU>;
#                `cpu` on a machine without]
#   PORT [8000], UPSTREAM_PORTS, DTYPE [bfloat16], SERVER [auto, vllm or paco],
#   PYTHON [python3: the interpreter with vLLM and paco-rl],
#   GPU_MEMORY_UTILIZATION [0.9: each GPU's share, split evenly among the vLLM servers on it]
#
# CLIP-H, the CLIP-T reward's model (1 B parameters), is not served: it stays in each training
# process, on that process's GPU.
set -euo pipefail
usage="usage: bash recipes/serve_rewards.sh MODEL [SERVER FLAGS], or MODEL_PATHS=a,b MODEL_NAMES=A,B"
MODEL_PATHS=${MODEL_PATHS:-${VLLM_MODEL_PATHS:-}}
if [ -z "$MODEL_PATHS" ]; then
  [ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
  MODEL_PATHS=$1
  shift
fi
server_flags=("$@")
MODEL_NAMES=${MODEL_NAMES:-${VLLM_MODEL_NAMES:-}}
PORT=${PORT:-${VLLM_PORT:-8000}}
GPUS=${GPUS-${GPU:-7}}
DTYPE=${DTYPE:-bfloat16}
SERVER=${SERVER:-auto}
PYTHON=${PYTHON:-python3}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.9}
IFS=, read -r -a paths <<< "$MODEL_PATHS"
count=${#paths[@]}
if [ -z "$MODEL_NAMES" ] && [ "$count" -eq 1 ]; then
  MODEL_NAMES=${SERVED_NAME:-PaCo-Reward-7B}
fi
IFS=, read -r -a names <<< "$MODEL_NAMES"
if [ "${#names[@]}" -ne "$count" ]; then
  echo "MODEL_NAMES needs one name per model ($count: $MODEL_PATHS); got '$MODEL_NAMES'" >&2
  exit 2
fi
per_model() {  # per_model VARIABLE LIST: LIST's items, one for every model or one per model
  local -n items=$1
  IFS=, read -r -a items <<< "$2"
  if [ "${#items[@]}" -eq 1 ]; then
    for ((k = 1; k < count; k++)); do items+=("${items[0]}"); done
  elif [ "${#items[@]}" -gt 1 ] && [ "${#items[@]}" -ne "$count" ]; then
    echo "'$2' lists one item per model ($count) or one for all" >&2
    exit 2
  fi
}
per_model gpus "$GPUS"
per_model devices "${DEVICE:-}"
if [ "$SERVER" = auto ]; then
  SERVER=paco
  if "$PYTHON" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)'; then
    SERVER=vllm
  fi
fi

if [ "$SERVER" = paco ]; then
  if [ "${#devices[@]}" -eq 0 ]; then
    for gpu in "${gpus[@]}"; do devices+=("cuda:$gpu"); done
  fi
  device_flags=()
  [ "${#devices[@]}" -eq 0 ] || device_flags=(--device "${devices[@]}")
  exec "$PYTHON" -m paco_reward.cli serve "${paths[@]}" --served_model_name "${names[@]}" \
    --host 127.0.0.1 --port "$PORT" --dtype "$DTYPE" "${device_flags[@]}" "${server_flags[@]}"
fi
[ "$SERVER" = vllm ] || { echo "SERVER must be auto, vllm or paco; got '$SERVER'" >&2; exit 2; }

vllm_server() {  # vllm_server K PORT: model K on its GPU, in place of the calling shell
  local k=$1 port=$2 placement=() memory=()
  if [ "${#gpus[@]}" -gt 0 ]; then
    local gpu=${gpus[$k]} sharing=0
    for other in "${gpus[@]}"; do [ "$other" != "$gpu" ] || sharing=$((sharing + 1)); done
    placement=(env "CUDA_VISIBLE_DEVICES=$gpu")
    memory=(--gpu-memory-utilization
      "$(awk -v u="$GPU_MEMORY_UTILIZATION" -v n="$sharing" 'BEGIN { printf "%.3f", u / n }')")
  fi
  exec "${placement[@]}" "$PYTHON" -m vllm.entrypoints.openai.api_server --model "${paths[$k]}" \
    --served-model-name "${names[$k]}" --host 127.0.0.1 --port "$port" --dtype "$DTYPE" \
    "${memory[@]}" "${server_flags[@]}"
}
if [ "$count" -eq 1 ]; then
  vllm_server 0 "$PORT"
fi

IFS=, read -r -a upstream_ports <<< "${UPSTREAM_PORTS:-}"
if [ "${#upstream_ports[@]}" -eq 0 ]; then
  for ((k = 0; k < count; k++)); do upstream_ports+=($((PORT + 1 + k))); done
fi
pids=()
stop_all() {
  trap - EXIT INT TERM
  [ "${#pids[@]}" -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true
  wait || true
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
upstreams=()
for ((k = 0; k < count; k++)); do
  vllm_server "$k" "${upstream_ports[$k]}" &
  pids+=($!)
  upstreams+=("${names[$k]}=http://127.0.0.1:${upstream_ports[$k]}/v1")
done
"$PYTHON" -m paco_reward.cli gateway "${upstreams[@]}" --host 127.0.0.1 --port "$PORT" &
pids+=($!)
wait -n  # the first server to exit stops the others (the EXIT trap)
