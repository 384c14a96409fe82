"""Settings shared by the vLLM peer tests (imported by their conftest and test modules)."""

SERVED_NAME = "PaCo-Reward-7B"  # the name the README's example asks for
# Remote and in-process vLLM agree with the transformers backend to this (float32 on CPU).
EXACT = 1e-5
# vllm.LLM kwargs of the in-process engine on a CPU (see paco_reward.testing.vllm_server).
LLM_KWARGS = {"enforce_eager": True, "max_model_len": 4096, "kv_cache_memory_bytes": 1 << 30}
