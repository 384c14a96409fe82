"""Know before you launch: a training process's memory, component by component, computed
from the real architectures on the meta device (no weights, no GPU).

A :class:`Plan` lists :class:`Component` s (frozen weights by dtype, LoRA parameters, their
gradients, optimizer states and EMA, activations, rewards) and says whether they fit a GPU.
Weights and optimizer states are exact counts. Activations are an estimate,
:func:`activation_bytes`: the bytes autograd saves for the backward of one micro-batch,
counted by running the forward on the meta device with attention taken as a fused kernel
(FlashAttention and PyTorch's CPU kernel save q, k, v, the output and one log-sum-exp per
row, never the L x L matrix) and, under mixed precision, matrix products taking copies of
their float32 inputs in the lower precision as autocast does, times a factor for the
gradients alive during the backward. With gradient checkpointing a block keeps only its
inputs and one block at a time is recomputed. ``benchmarks/plan_calibration.py`` measures
the factor and the remaining error against the peak memory of real runs at reduced width;
``benchmarks/sft_step.py`` measures the saved bytes of the evaluator's SFT step.

    >>> plan = Plan("demo", [Component("transformer", 10**9, "bfloat16")], gpu_memory_bytes=4 * 2**30)
    >>> plan.per_process_bytes, plan.fits
    (2000000000, True)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from paco_reward.errors import ConfigError, InputError, PlanError

__all__ = [
    "ActivationEstimate",
    "PlanOptions",
    "Component",
    "Plan",
    "PlanError",
    "activation_bytes",
    "check_plan",
    "dtype_bytes",
    "gpu_memory_bytes",
    "node_facts",
]

logger = logging.getLogger(__name__)

GiB = 2**30


def dtype_bytes(dtype: str | torch.dtype) -> int:
    """Bytes of one element of ``dtype`` (``"bfloat16"`` or ``torch.bfloat16``)."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return torch.empty((), dtype=dtype).element_size()


@dataclass
class Component:
    """One thing a process holds: ``parameters`` elements of ``dtype`` (``bytes`` derived
    unless given, for activations), a ``kind`` (``"frozen"``, ``"trained"``, ``"activations"``,
    ``"inputs"``, ``"reward"``) and a ``note`` saying how it was counted."""

    name: str
    parameters: int
    dtype: str
    bytes: int = -1
    kind: str = "frozen"
    note: str = ""

    def __post_init__(self) -> None:
        if self.bytes < 0:
            self.bytes = self.parameters * dtype_bytes(self.dtype)


def check_plan(
    make_plan: Callable[[float | None], Plan],
    device: torch.device | str | None,
    *,
    skip: bool = False,
    is_main_process: bool = True,
) -> Plan | None:
    """Plan a training process at start-up, before any weight loads: ``make_plan(gpu_gb)``
    for the GPU of ``device`` (no verdict without one), the table printed by the main
    process. Refuses a certain failure (the weights and optimizer states alone exceed the
    GPU) unless ``skip``; warns, and goes on, when only the activation estimate does. A plan
    that cannot be made (an unknown architecture) is a warning: the plan never blocks a run
    on its own mistake. Without a GPU there is no verdict, so only the main process plans
    (for its table): the others return ``None`` at once.

    Raises:
        PlanError: with the plan and what to change, for a certain failure.
    """
    memory = gpu_memory_bytes(device)
    if memory is None and not is_main_process:
        return None  # nothing to refuse or print; planning would only import architectures
    try:
        plan = make_plan(memory / GiB if memory else None)
    except Exception as err:  # advice only: a plan that fails must not stop the run
        logger.warning("No memory plan for this launch (%s: %s).", type(err).__name__, err)
        return None
    if is_main_process:
        print(plan.table(), flush=True)
    if plan.certain_failure and not skip:
        raise PlanError(
            f"This launch cannot fit: {plan.verdict()}. Change: {'; '.join(plan.advice)}. "
            "(--skip_plan_check launches anyway.)"
        )
    if plan.fits is False:
        logger.warning("%s. Consider: %s.", plan.verdict(), "; ".join(plan.advice))
    return plan


@dataclass
class Plan:
    """A process's memory by component, and whether it fits ``gpu_memory_bytes`` (``None``:
    unknown, no verdict). ``facts`` are the launch's numbers (images per process, optimizer
    steps per epoch, ...), printed with the table."""

    title: str
    components: list[Component]
    gpu_memory_bytes: int | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)

    @property
    def per_process_bytes(self) -> int:
        return sum(c.bytes for c in self.components)

    @property
    def static_bytes(self) -> int:
        """Everything but activations: what is held whatever the micro-batch."""
        return sum(c.bytes for c in self.components if c.kind != "activations")

    @property
    def fits(self) -> bool | None:
        if self.gpu_memory_bytes is None:
            return None
        return self.per_process_bytes <= self.gpu_memory_bytes

    @property
    def certain_failure(self) -> bool:
        """The weights and optimizer states alone exceed the GPU (the estimate plays no part)."""
        return self.gpu_memory_bytes is not None and self.static_bytes > self.gpu_memory_bytes

    def verdict(self) -> str:
        if self.gpu_memory_bytes is None:
            return "no GPU memory given (--gpu_memory_gb): no verdict"
        gpu = self.gpu_memory_bytes / GiB
        need = self.per_process_bytes / GiB
        if self.certain_failure:
            return f"does NOT fit: {self.static_bytes / GiB:.1f} GiB before activations > {gpu:.1f} GiB"
        if not self.fits:
            return f"may not fit: {need:.1f} GiB with the activation estimate > {gpu:.1f} GiB"
        return f"fits: {need:.1f} GiB of {gpu:.1f} GiB ({100 * need / gpu:.0f} %)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "components": [
                {
                    "name": c.name,
                    "parameters": c.parameters,
                    "dtype": c.dtype,
                    "bytes": c.bytes,
                    "kind": c.kind,
                    "note": c.note,
                }  # fmt: skip
                for c in self.components
            ],
            "per_process_bytes": self.per_process_bytes,
            "static_bytes": self.static_bytes,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "fits": self.fits,
            "certain_failure": self.certain_failure,
            "verdict": self.verdict(),
            **self.facts,
            "advice": self.advice,
        }

    def table(self) -> str:
        """The plan as a markdown table, its facts and verdict below."""
        rows = [f"### {self.title}", "", "| component | parameters | dtype | GiB | how |",
                "|---|---:|---|---:|---|"]  # fmt: skip
        for c in self.components:
            params = _count(c.parameters) if c.parameters else ""
            rows.append(f"| {c.name} | {params} | {c.dtype} | {c.bytes / GiB:.2f} | {c.note} |")
        rows.append(f"| **per process** | | | **{self.per_process_bytes / GiB:.2f}** | |")
        rows.append("")
        rows += [f"- {k.replace('_', ' ')}: {v}" for k, v in self.facts.items()]
        rows.append(f"- verdict: {self.verdict()}")
        rows += [f"- advice: {a}" for a in self.advice]
        return "\n".join(rows)


def _count(n: int) -> str:
    return f"{n / 1e9:.3f} B" if n >= 10**8 else f"{n / 1e6:.3f} M"


def gpu_memory_bytes(device: torch.device | str | None = None) -> int | None:
    """Total memory of the CUDA ``device`` (this process's by default); ``None`` elsewhere."""
    from paco_reward.devices import default_device

    device = torch.device(device) if device is not None else default_device()
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(device).total_memory


@dataclass(kw_only=True)  # keyword-only: mixed into configs whose fields come first
class PlanOptions:
    """The launch a plan is for: the ``plan`` commands' fields beside the recipe's."""

    num_processes: int = field(
        default=1,
        metadata={
            "help": "Processes (GPUs) of the launch, on all its nodes together (as accelerate "
            "launch counts them); the recipe's batch arithmetic splits over them."
        },
    )
    num_machines: int = field(
        default=1,
        metadata={
            "help": "Nodes of the launch (accelerate launch's --num_machines); each runs "
            "num_processes / num_machines processes."
        },
    )
    gpu_memory_gb: float | None = field(
        default=None,
        metadata={
            "help": "Memory of one GPU in GB (GiB, as nvidia-smi's MiB / 1024), e.g. 80; none: no verdict."
        },
    )
    sharded: bool = field(
        default=False,
        metadata={
            "help": "The launch shards: FSDP (fsdp_grpo.yaml) for GRPO, ZeRO-2 (sft_zero2.yaml) for SFT."
        },
    )
    json: bool = field(
        default=False,
        metadata={"help": "Print the plan as JSON ({components, per_process_bytes, fits, ...})."},
    )

    def print_plan(self, plan: Plan) -> int:
        """Print ``plan`` as the options say; exit code 0 (a plan is advice, not a gate)."""
        import json

        print(json.dumps(plan.to_dict(), indent=2) if self.json else plan.table())
        return 0


def node_facts(num_processes: int, num_machines: int) -> dict[str, int]:
    """A plan's facts about the nodes of a launch of ``num_processes`` processes in all over
    ``num_machines`` nodes (accelerate's counts): none for one node.

    Raises:
        ConfigError: when the processes do not split evenly over the nodes.

    Example:
        >>> node_facts(14, 2)
        {'nodes': 2, 'processes_per_node': 7}
    """
    if num_machines < 1 or num_processes % num_machines:
        raise ConfigError(
            f"num_processes {num_processes} do not split over num_machines {num_machines}: "
            "num_processes counts the processes of all nodes (as accelerate launch does), so "
            f"give processes per node x nodes, e.g. {7 * max(num_machines, 1)} for "
            f"{max(num_machines, 1)} node(s) of 7 training processes."
        )
    if num_machines == 1:
        return {}
    return {"nodes": num_machines, "processes_per_node": num_processes // num_machines}


# ----------------------------------------------------------------------------- activations
# The peak of a backward is above what autograd saved by the gradients alive meanwhile;
# measured at two reduced widths, with and without checkpointing, it is 6-12 % above
# (benchmarks/plan_calibration.py). The estimate is the saved bytes times this factor.
BACKWARD_PEAK_FACTOR = 1.10


@dataclass(frozen=True)
class ActivationEstimate:
    """Bytes autograd saves for one backward, at their peak: without gradient checkpointing
    (everything saved, at the end of the forward) and with it (the larger of what the
    forward leaves, ``left_by_forward``, and what is alive when the backward recomputes a
    stack's last block). ``largest_block``: one block's saved tensors."""

    saved_without_checkpointing: int
    saved_with_checkpointing: int
    left_by_forward: int
    largest_block: int

    def bytes(self, gradient_checkpointing: bool) -> int:
        """The estimated peak memory, times :data:`BACKWARD_PEAK_FACTOR`: without
        checkpointing the saved bytes; with it, what the forward leaves plus one block. A
        block's recompute adds its saved tensors and, while its backward runs, their
        gradients and its forward's transients: at FLUX's reduced widths
        (``benchmarks/plan_calibration.py``) the saved bytes' peak times the factor falls
        18-22 % short of the measured peak, this bound within 4 % of it."""
        if gradient_checkpointing:
            return int((self.left_by_forward + self.largest_block) * BACKWARD_PEAK_FACTOR)
        return int(self.saved_without_checkpointing * BACKWARD_PEAK_FACTOR)


class _FusedAttention(torch.autograd.Function):
    """Scaled dot-product attention saving what a fused kernel saves for its backward."""

    @staticmethod
    def forward(ctx, q, k, v):
        out = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # never run: the estimate only counts
        raise NotImplementedError


def _fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False):  # fmt: skip
    return _FusedAttention.apply(query, key, value)


@contextlib.contextmanager
def _fused_attention() -> Iterator[None]:
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _fused_sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


class _MixedPrecisionMatmuls(TorchFunctionMode):
    """What ``torch.autocast`` does to the saved tensors, on the meta device (where autocast
    has no effect): a matrix product runs in ``dtype``, a float32 operand cast to it first.
    A float32 LoRA layer under bf16 autocast therefore keeps a bf16 copy of its input for its
    backward, not the float32 one peft casts it to."""

    # autocast's lower-precision matrix products (the same on CUDA and CPU)
    OPS = frozenset({
        torch.nn.functional.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__,
        torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.baddbmm,
    })  # fmt: skip

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.OPS:
            args = tuple(self._cast(a) for a in args)
        return func(*args, **(kwargs or {}))

    def _cast(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            return value.to(self.dtype)
        return value


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _nbytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.ModuleList]:
    """The model's stacks of repeated blocks: the ``ModuleList`` s whose elements are of the
    classes diffusers names in ``_repeated_blocks`` (or transformers in ``_no_split_modules``),
    i.e. what gradient checkpointing wraps."""
    names = set(getattr(model, "_repeated_blocks", None) or [])
    names |= set(getattr(model, "_no_split_modules", None) or [])
    stacks = [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.ModuleList) and len(m) and type(m[0]).__name__ in names
    ]
    if not stacks:
        raise InputError(f"{type(model).__name__} names no repeated blocks to checkpoint.")
    return stacks


def activation_bytes(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    calls: int = 1,
    autocast_dtype: torch.dtype | None = None,
) -> ActivationEstimate:
    """Estimate the activations one backward of ``forward()`` keeps; ``calls`` forwards of
    the model before that backward (true CFG calls it twice) keep ``calls`` times as much,
    but recompute one block at a time. ``autocast_dtype``: the training step runs under
    ``torch.autocast`` in that dtype (mixed precision), so its matrix products keep
    lower-precision copies of float32 inputs (:class:`_MixedPrecisionMatmuls`).

    ``model`` lives on the meta device, its trained parameters ``requires_grad``; ``forward``
    runs it on meta inputs. Only the first block of each repeated stack runs (blocks of a
    stack are alike): the count is the saved tensors outside the blocks, plus, per stack,
    its length times the first block's (without checkpointing). With checkpointing a stack
    keeps each block's input, and the peak is the larger of what the forward leaves and what
    is alive when the backward recomputes a stack's last block: by then everything saved
    after that stack (the loss's float32 log-probabilities, for a language model) is freed,
    and one block's saved tensors are added.
    """
    stacks = repeated_blocks(model)
    # Tensors are told apart by their storage (a view costs nothing new); the storages are
    # kept referenced meanwhile, so that no address is reused for another.
    kept: list[torch.UntypedStorage] = []
    seen: set[int] = set()

    def see(t: torch.Tensor) -> None:
        kept.append(t.untyped_storage())
        seen.add(_storage(t))

    for p in model.parameters():
        see(p)
    counts: dict[str, int] = {}
    current: list[str] = ["outside"]
    # Outside the blocks, by how many stacks had run when it was saved: what is saved after
    # a stack is freed before the backward recomputes that stack's blocks.
    outside: dict[int, int] = {}
    finished: list[str] = []  # the stacks, in the order their (first) block ran

    def pack(t: torch.Tensor) -> torch.Tensor:
        if _storage(t) not in seen:  # weights and what is already counted cost nothing new
            see(t)
            if current[-1] == "outside":
                outside[len(finished)] = outside.get(len(finished), 0) + _nbytes(t)
            else:
                counts[current[-1]] = counts.get(current[-1], 0) + _nbytes(t)
        return t

    inputs: dict[str, int] = {}  # a stack's first inputs (hidden states, shared embeddings)
    outputs: dict[str, int] = {}  # what one block hands the next: kept per block when checkpointed
    handles = []
    for s, stack in enumerate(stacks):
        key = f"stack{s}"

        def pre(module, args, kwargs, key=key):
            new = {_storage(t): t for t in _tensors((args, kwargs)) if _storage(t) not in seen}
            inputs[key] = sum(_nbytes(t) for t in new.values())
            for t in new.values():
                see(t)
            current.append(key)

        def post(module, args, kwargs, output, key=key):
            current.pop()
            if key not in finished:
                finished.append(key)
            outputs[key] = sum(
                _nbytes(t) for t in {_storage(t): t for t in _tensors(output)}.values()
            )

        handles.append(stack[0].register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(stack[0].register_forward_hook(post, with_kwargs=True))
    lengths = [len(stack) for stack in stacks]
    originals = [list(stack) for stack in stacks]
    try:
        for stack in stacks:  # one block per stack runs
            while len(stack) > 1:
                del stack[len(stack) - 1]
        precision = (
            _MixedPrecisionMatmuls(autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        )
        with (
            _fused_attention(),
            precision,
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
        ):
            forward()
    finally:
        for stack, blocks in zip(stacks, originals, strict=True):
            for block in blocks[1:]:
                stack.append(block)
        for h in handles:
            h.remove()
    length = dict(zip([f"stack{s}" for s in range(len(stacks))], lengths))
    kept = {k: inputs.get(k, 0) + (n - 1) * outputs.get(k, 0) for k, n in length.items()}
    everything_outside = sum(outside.values())
    without = everything_outside + sum(n * counts.get(k, 0) for k, n in length.items())
    forward_leaves = everything_outside + sum(kept.values())
    recompute = max(
        (
            sum(b for ran, b in outside.items() if ran <= i)  # saved before stack i ended
            + sum(kept[k] for k in finished[: i + 1])
            + counts.get(key, 0)
            for i, key in enumerate(finished)
        ),
        default=0,
    )
    # Earlier calls' graphs are whole while the last one's backward recomputes its blocks.
    with_checkpointing = (calls - 1) * forward_leaves + max(forward_leaves, recompute)
    block = max(counts.values(), default=0)
    return ActivationEstimate(calls * without, with_checkpointing, calls * forward_leaves, block)
