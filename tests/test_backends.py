"""Backend choice in ``PacoReward.from_pretrained``: unknown names and a missing vLLM fail
with errors that say what to do (the vLLM backend itself is tested in tests/vllm_peer)."""

from __future__ import annotations

import sys

import pytest

from paco_reward import PacoReward
from paco_reward.errors import InputError, MissingDependencyError


def test_missing_vllm_names_the_extra(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vLLM were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'paco-rl\[vllm\]'"):
        PacoReward.from_pretrained(tiny_model_dir, backend="vllm")


def test_unknown_backend_and_vllm_with_an_adapter_are_refused(tiny_model_dir):
    with pytest.raises(InputError, match="backend must be 'transformers' or 'vllm'"):
        PacoReward.from_pretrained(tiny_model_dir, backend="onnx")
    with pytest.raises(InputError, match="merge the adapter first"):
        PacoReward.from_pretrained(tiny_model_dir, backend="vllm", adapter=tiny_model_dir)
