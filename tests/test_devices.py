"""``paco_reward.devices``: each process's device carries its index (``cuda:<LOCAL_RANK>``),
a bare ``"cuda"`` never means GPU 0 for every process, and a CPU-only machine gets the CPU.

CUDA is patched in (``is_available`` / ``device_count``), so these run on any machine."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from paco_reward.devices import default_device, local_process_index, resolve_device
from paco_reward.errors import ConfigError, InputError, LaunchError


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: pretend this machine has ``n`` CUDA devices (0 = CPU-only), with no
    accelerate state initialised in the process."""
    state = sys.modules.get("accelerate.state")
    if state is not None:  # as if no Accelerator had been built in this process
        monkeypatch.setattr(state.PartialState, "_shared_state", {})

    def set_count(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return set_count


def test_local_rank_picks_the_process_gpu(gpus, monkeypatch):
    gpus(8)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert default_device() == torch.device("cuda", 3)
    assert resolve_device(None) == torch.device("cuda", 3)


def test_without_local_rank_the_first_gpu(gpus, monkeypatch):
    gpus(8)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert local_process_index() == 0
    assert default_device() == torch.device("cuda", 0)


def test_a_bare_cuda_gets_the_process_index(gpus, monkeypatch):
    gpus(8)
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert resolve_device("cuda") == torch.device("cuda", 5)
    assert resolve_device(torch.device("cuda")) == torch.device("cuda", 5)
    assert resolve_device("cuda").index == 5
    # An explicit index or another device is kept as given.
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_cpu_only_machine_gets_the_cpu(gpus, monkeypatch):
    gpus(0)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert default_device() == torch.device("cpu")
    assert resolve_device(None) == torch.device("cpu")


def test_one_visible_gpu_per_process_is_cuda_0(gpus, monkeypatch):
    """A scheduler that sets CUDA_VISIBLE_DEVICES per process leaves one GPU visible: cuda:0."""
    gpus(1)
    monkeypatch.setenv("LOCAL_RANK", "5")
    assert default_device() == torch.device("cuda", 0)


def test_more_processes_than_gpus_fails_with_the_numbers(gpus, monkeypatch):
    gpus(4)
    monkeypatch.setenv("LOCAL_RANK", "6")
    with pytest.raises(LaunchError, match=r"LOCAL_RANK=6 but this process sees only 4 CUDA"):
        default_device()


def test_bad_inputs_are_named(gpus, monkeypatch):
    gpus(0)
    monkeypatch.setenv("LOCAL_RANK", "first")
    with pytest.raises(ConfigError, match=r"LOCAL_RANK='first' is not a process index"):
        local_process_index()
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(InputError, match=r"device='gpu' is not a torch device"):
        resolve_device("gpu")


def test_an_initialised_accelerate_state_decides(gpus, monkeypatch):
    """A trainer's ``Accelerator(cpu=True)`` keeps models on the CPU on a GPU machine; its
    CUDA device without an index gets the process index. An accelerate that is imported but
    not initialised is not consulted (and nothing here initialises it)."""
    gpus(8)
    monkeypatch.setenv("LOCAL_RANK", "2")

    class State:
        _shared_state: dict = {}
        device = torch.device("cpu")

    monkeypatch.setitem(sys.modules, "accelerate.state", types.SimpleNamespace(PartialState=State))
    assert default_device() == torch.device("cuda", 2)  # imported, not initialised
    monkeypatch.setattr(State, "_shared_state", {"initialized": True})
    assert default_device() == torch.device("cpu")
    monkeypatch.setattr(State, "device", torch.device("cuda"))
    assert default_device() == torch.device("cuda", 2)
    # An explicit device is the user's choice, whatever the state says.
    assert resolve_device("cuda:7") == torch.device("cuda", 7)


def test_scorers_default_to_this_process_device(tiny_model_dir, tmp_path, monkeypatch):
    """The scorer and the CLIP baseline take their default device from resolve_device."""
    import paco_reward.devices as devices
    from paco_reward import PacoReward
    from paco_reward.baselines import CLIPImageScorer
    from paco_reward.testing.clip import build_tiny_clip

    asked = []

    def recording_resolve(device):
        asked.append(device)
        return torch.device("cpu")

    monkeypatch.setattr(devices, "resolve_device", recording_resolve)
    monkeypatch.setattr("paco_reward.local_backend.resolve_device", recording_resolve)
    rm = PacoReward.from_pretrained(tiny_model_dir, device="cuda")
    assert rm.backend.device == torch.device("cpu")
    clip = CLIPImageScorer(build_tiny_clip(tmp_path / "clip"))
    assert clip.device == torch.device("cpu")
    assert asked == ["cuda", None]
