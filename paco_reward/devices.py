"""The device this process computes on, with its index.

Under ``accelerate launch`` or ``torchrun`` every process of a machine sees all its GPUs,
so a bare ``"cuda"`` (or ``.cuda()``) puts every process's model on GPU 0; and in a worker
thread the current CUDA device is 0 whatever the main thread set. Library code therefore
never resolves a bare ``"cuda"``: it asks :func:`default_device` (the process's own GPU)
or :func:`resolve_device` (a user's ``device=`` argument, with an index added).

Which GPU is this process's:

1. the device of an accelerate state that is *already* initialised in this process (an
   ``Accelerator`` or ``PartialState`` built by the trainer), so a run with
   ``Accelerator(cpu=True)`` keeps its models on the CPU. accelerate is never imported
   nor initialised here: building a ``PartialState`` starts the distributed process group,
   a side effect a device query must not have;
2. otherwise ``cuda:<LOCAL_RANK>``, the variable ``torchrun``, ``accelerate launch`` and
   DeepSpeed set for each process (0 when unset). When a process sees a single GPU (a
   scheduler that sets ``CUDA_VISIBLE_DEVICES`` per process) that GPU is ``cuda:0``;
3. the CPU when CUDA is not available. MPS is never picked by default (several
   Qwen2.5-VL and FLUX kernels are slow or missing there): pass ``device="mps"``.

    >>> model.to(default_device())       # doctest: +SKIP
    >>> resolve_device("cuda")            # 4th process of a machine (LOCAL_RANK=3)  # doctest: +SKIP
    device(type='cuda', index=3)
    >>> resolve_device("cpu")
    device(type='cpu')
"""

from __future__ import annotations

import os
import sys

import torch

from paco_reward.errors import ConfigError, InputError, LaunchError

__all__ = [
    "default_device",
    "host_to_device",
    "local_process_index",
    "pin_for",
    "resolve_device",
]


def local_process_index() -> int:
    """This process's index on its machine: ``LOCAL_RANK`` (set by ``torchrun``,
    ``accelerate launch`` and DeepSpeed), 0 when unset.

    Raises:
        ValueError: ``LOCAL_RANK`` is set but is not a non-negative integer.

    Example:
        >>> import os
        >>> os.environ.get("LOCAL_RANK") is not None or local_process_index() == 0
        True
    """
    value = os.environ.get("LOCAL_RANK", "").strip()
    if not value:
        return 0
    try:
        index = int(value)
    except ValueError:
        index = -1
    if index < 0:
        raise ConfigError(
            f"LOCAL_RANK={value!r} is not a process index (a non-negative integer); unset it "
            "or launch with torchrun / accelerate launch, which set it."
        )
    return index


def _cuda_index() -> int:
    """The CUDA device index of this process (``LOCAL_RANK``, or 0 when one GPU is visible)."""
    index = local_process_index()
    count = torch.cuda.device_count()
    if index < count or count == 0:
        return index
    if count == 1:  # one GPU per process (CUDA_VISIBLE_DEVICES set per process)
        return 0
    raise LaunchError(
        f"LOCAL_RANK={index} but this process sees only {count} CUDA devices; launch at most "
        f"{count} processes per machine or set CUDA_VISIBLE_DEVICES to the GPUs to use."
    )


def _accelerate_device() -> torch.device | None:
    """The device of an accelerate state already initialised in this process, else None.

    Reads the state only when accelerate is already imported; never imports nor builds it."""
    state_module = sys.modules.get("accelerate.state")
    partial_state = getattr(state_module, "PartialState", None)
    if partial_state is None or not getattr(partial_state, "_shared_state", None):
        return None
    return torch.device(partial_state().device)


def default_device() -> torch.device:
    """The device this process should compute on, with its index.

    An initialised accelerate state's device when there is one, else ``cuda:<LOCAL_RANK>``
    when CUDA is available, else the CPU (see the module docstring for why).

    Returns:
        e.g. ``device(type='cuda', index=3)`` for the fourth process of a machine under
        ``accelerate launch``, ``device(type='cpu')`` on a CPU-only machine.

    Example:
        >>> import torch
        >>> default_device().type in ("cpu", "cuda", "mps", "xpu", "npu")
        True
    """
    device = _accelerate_device()
    if device is not None:
        if device.type == "cuda" and device.index is None:
            return torch.device("cuda", _cuda_index())
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", _cuda_index())
    return torch.device("cpu")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A ``device=`` argument as a ``torch.device``: ``None`` is :func:`default_device`, a
    bare ``"cuda"`` becomes ``cuda:<index of this process>`` (``LOCAL_RANK``), anything else
    is ``torch.device(device)`` as given (``"cpu"``, ``"cuda:1"``, ``"mps"``).

    Raises:
        ValueError: ``device`` names no torch device (e.g. ``"gpu"``).

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> resolve_device(torch.device("cuda", 1))
        device(type='cuda', index=1)
    """
    if device is None:
        return default_device()
    if isinstance(device, torch.device):
        resolved = device
    else:
        try:
            resolved = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise InputError(
                f"device={device!r} is not a torch device; use e.g. 'cpu', 'cuda', 'cuda:1', "
                f"'mps', or None for this process's default ({err})."
            ) from None
    if resolved.type == "cuda" and resolved.index is None:
        return torch.device("cuda", _cuda_index())
    return resolved


def pin_for(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (on the host) in page-locked memory when it is going to a CUDA ``device``, so
    that :func:`host_to_device` copies it without the host waiting; as it is otherwise.

    Example:
        >>> pin_for(torch.zeros(2), torch.device("cpu")).is_pinned()
        False
    """
    return tensor.pin_memory() if device.type == "cuda" and not tensor.is_pinned() else tensor


def host_to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``, copied without a host-device synchronisation: from pinned
    memory with ``non_blocking=True`` to a CUDA device (a copy from pageable memory makes the
    host wait for the stream); unchanged on the host.

    Example:
        >>> host_to_device(torch.arange(3), torch.device("cpu"))
        tensor([0, 1, 2])
    """
    if tensor.device == device:
        return tensor
    return pin_for(tensor, device).to(device, non_blocking=True)
