"""Vision attention in one call per distinct window length.

With any attention implementation but flash-attention's variable-length kernels, transformers'
Qwen-VL vision attention (Qwen2.5-VL's window attention, Qwen3-VL's per-image attention) splits
``cu_seqlens`` and calls attention once per window: a 504 x 504 image has 25 windows, so
Qwen2.5-VL-7B makes about 1,400 calls of 16-64 tokens to score one pair, each a few
microseconds of GPU work behind tens of microseconds of Python. The windows of a block have
few distinct lengths (a full window, the right and bottom edges, the corner), so
:func:`group_vision_attention` replaces the ``forward`` of each vision attention module of a
*loaded instance* (no class, no other model and nothing in transformers changes) by
transformers' own forward with the per-window loop replaced: the windows of each length are
stacked into one batch and attended in one call of the same attention function
(:func:`attention_by_length`). Attention is independent per window, and the kernels compute
each batch entry as they compute a lone window, so the vision tower's output is the same
(``torch.equal`` on the CPU, fp32 and bf16: ``tests/test_vision_attention.py``).

The forward below is transformers' ``Qwen2_5_VLVisionAttention.forward`` (Qwen2-VL's
``VisionAttention`` and Qwen3-VL's ``Qwen3VLVisionAttention`` are the same code) of the
releases it was checked against, :data:`CHECKED_TRANSFORMERS`. A module is grouped only when
its class's forward is that code (:data:`CHECKED_FORWARDS`: a fingerprint of the forward's
source, :func:`forward_fingerprint`), the class has the attributes and modeling functions the
copy reads, and the instance has no ``forward`` of its own (a hook's, a patch's, which
grouping would replace). Another transformers release, a subclass or a patched forward is
not grouped: with ``mode="auto"`` (the default) a warning names the class and the
transformers version and the model keeps transformers' own forward (the same scores, only
slower); with ``mode="grouped"`` it is a :class:`~paco_reward.errors.VisionAttentionError`;
``mode="stock"`` never groups.

    >>> group_vision_attention(model)  # doctest: +SKIP
    4
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import logging
import sys
import textwrap
import types
from collections.abc import Callable, Sequence

import torch

from paco_reward.errors import InputError, VisionAttentionError
from paco_reward.modeling import vision_tower

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKED_FORWARDS",
    "CHECKED_TRANSFORMERS",
    "VISION_ATTENTION_MODES",
    "attention_by_length",
    "check_vision_attention",
    "check_vision_attention_mode",
    "forward_fingerprint",
    "group_vision_attention",
    "vision_attention_modules",
]

# The transformers releases whose vision attention the forward below copies, checked.
CHECKED_TRANSFORMERS = ">=5.19,<5.24"
# forward_fingerprint of the Qwen-VL vision attention forwards the copy below was checked
# against: Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's and Qwen3-VL-MoE's, one code in 5.19 to 5.23.
CHECKED_FORWARDS = frozenset({"fbd0149e13e55002ff5e4197ea47bd511c44f16b8de7b3ade0f91ac9525c14bd"})
# group_vision_attention's modes: group where the forward is the checked one, else keep
# transformers' own (auto); group or raise (grouped); never group (stock).
VISION_ATTENTION_MODES = ("auto", "grouped", "stock")
# What the forward reads from a module, its class's forward signature and its modeling file.
_ATTRIBUTES = ("qkv", "proj", "num_heads", "scaling", "config", "attention_dropout")
_FORWARD_PARAMETERS = (
    "self",
    "hidden_states",
    "cu_seqlens",
    "position_embeddings",
    "max_seqlen",
    "kwargs",
)
_MODELING_FUNCTIONS = ("apply_rotary_pos_emb_vision", "eager_attention_forward")


def vision_attention_modules(model) -> list[torch.nn.Module]:
    """The attention module of each block of ``model``'s vision tower (``visual.blocks[i].attn``).

    Raises:
        VisionAttentionError: the tower has no ``blocks`` or a block no ``attn``.
    """
    visual = vision_tower(model)
    blocks = getattr(visual, "blocks", None)
    modules = [getattr(block, "attn", None) for block in blocks or ()]
    if not modules or any(module is None for module in modules):
        raise VisionAttentionError(
            f"{type(visual).__name__} has no blocks[i].attn, where the Qwen-VL vision towers "
            f"of transformers {CHECKED_TRANSFORMERS} keep their attention; the scorer groups "
            "the vision attention's windows there. Install transformers in that range."
        )
    return modules


def forward_fingerprint(function: Callable) -> str | None:
    """The SHA-256 of ``function``'s code: its source parsed, without its docstring, dumped
    (comments, blank lines and formatting do not count; any change of the code does);
    ``None`` when its source cannot be read.

    Example:
        >>> forward_fingerprint(torch.nn.Linear.forward) == forward_fingerprint(torch.nn.Linear.forward)
        True
    """
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):  # built in, or made at run time
        return None
    node = ast.parse(source).body[0]
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        node.body = body[1:]  # type: ignore[attr-defined]
    return hashlib.sha256(ast.dump(node).encode()).hexdigest()


def check_vision_attention_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`VISION_ATTENTION_MODES`.

    Raises:
        InputError: another value.

    Example:
        >>> check_vision_attention_mode("stock")
        'stock'
    """
    if mode not in VISION_ATTENTION_MODES:
        raise InputError(f"vision_attention must be one of {VISION_ATTENTION_MODES}; got {mode!r}.")
    return mode


def check_vision_attention(module: torch.nn.Module) -> None:
    """Raise :class:`VisionAttentionError` naming ``module``'s class (and the transformers
    version) unless :func:`group_vision_attention` may replace its forward: its class's
    forward is a checked one (:data:`CHECKED_FORWARDS`), with the attributes, parameters and
    modeling functions the copy reads, and the instance has no ``forward`` of its own but ours.

    Example:
        >>> check_vision_attention(torch.nn.Linear(2, 2))
        Traceback (most recent call last):
        ...
        paco_reward.errors.VisionAttentionError: torch.nn.modules.linear.Linear (transformers ...
    """
    import transformers

    cls = type(module)
    name = f"{cls.__module__}.{cls.__qualname__} (transformers {transformers.__version__})"
    problems = [f"no attribute {a!r}" for a in _ATTRIBUTES if not hasattr(module, a)]
    parameters = tuple(inspect.signature(cls.forward).parameters)
    if parameters != _FORWARD_PARAMETERS:
        problems.append(f"forward{parameters} instead of forward{_FORWARD_PARAMETERS}")
    modeling = sys.modules.get(cls.__module__)
    problems += [
        f"no {f}() in {cls.__module__}"
        for f in _MODELING_FUNCTIONS
        if not callable(getattr(modeling, f, None))
    ]
    if not problems and forward_fingerprint(cls.forward) not in CHECKED_FORWARDS:
        problems.append("its forward is not the code the copy was checked against")
    own = vars(module).get("forward")
    if own is not None and getattr(own, "__func__", None) is not _grouped_forward:
        problems.append(f"the instance has a forward of its own ({own!r}: a hook or a patch)")
    if problems:
        raise VisionAttentionError(
            f"{name} is not the Qwen-VL vision attention of transformers {CHECKED_TRANSFORMERS} "
            f"that the scorer's grouped window attention copies: {'; '.join(problems)}. Score "
            "with transformers' own forward (vision_attention='auto' or 'stock': the same "
            "scores, slower), or install transformers in that range (pip install "
            f"'transformers{CHECKED_TRANSFORMERS}')."
        )


def group_vision_attention(model, mode: str = "auto") -> int:
    """Make every vision attention module of ``model`` (a loaded instance; a PEFT wrapper
    too) attend in one call per distinct window length; returns how many modules (0: none,
    transformers' own forward kept). Every module is checked before any is changed; calling
    it again changes nothing more.

    Args:
        mode: ``"auto"``: group when every module passes :func:`check_vision_attention`, else
            log one warning naming the class and keep transformers' forward; ``"grouped"``:
            group or raise; ``"stock"``: change nothing.

    Raises:
        VisionAttentionError: ``mode="grouped"`` and a module (named) cannot be grouped.
        InputError: an unknown ``mode``.
    """
    if check_vision_attention_mode(mode) == "stock":
        return 0
    try:
        modules = vision_attention_modules(model)
        for module in modules:
            check_vision_attention(module)
    except VisionAttentionError as err:
        if mode == "grouped":
            raise
        logger.warning("Vision attention not grouped, transformers' own forward kept: %s", err)
        return 0
    for module in modules:
        module.forward = types.MethodType(_grouped_forward, module)
    return len(modules)


def attention_by_length(
    attention: Callable,
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    lengths: Sequence[int],
    **kwargs,
) -> torch.Tensor:
    """``attention`` (a transformers attention function) over each segment of ``lengths``
    tokens of ``query``/``key``/``value`` (``[1, heads, sum(lengths), head_dim]``) alone, in
    one call per distinct length (the segments of a length stacked as a batch); the outputs
    ``[1, sum(lengths), heads, head_dim]`` in segment order, as transformers' per-segment loop
    concatenates them."""
    by_length: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        by_length.setdefault(length, []).append(index)
    splits = [torch.split(t, list(lengths), dim=2) for t in (query, key, value)]
    pieces: list[torch.Tensor | None] = [None] * len(lengths)
    for members in by_length.values():
        batch = [torch.cat([parts[i] for i in members]) for parts in splits]
        output, _ = attention(
            module, *batch, attention_mask=None, scaling=module.scaling, is_causal=False, **kwargs
        )
        for index, piece in zip(members, output.split(1)):
            pieces[index] = piece
    return torch.cat(pieces, dim=1)


def _grouped_forward(
    self,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_seqlen: int | None = None,
    **kwargs,
) -> torch.Tensor:
    # transformers' Qwen2_5_VLVisionAttention.forward (CHECKED_TRANSFORMERS), with the loop over
    # cu_seqlens replaced by attention_by_length. A cu_seqlens on the host (the scorer passes it
    # there) is read without waiting for the device.
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.utils.generic import is_flash_attention_requested

    if is_flash_attention_requested(self.config):  # varlen kernels: one call per block already
        return type(self).forward(
            self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs
        )
    modeling = sys.modules[type(self).__module__]
    seq_length = hidden_states.shape[0]
    query_states, key_states, value_states = (
        self.qkv(hidden_states).reshape(seq_length, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    )  # fmt: skip
    cos, sin = position_embeddings
    query_states, key_states = modeling.apply_rotary_pos_emb_vision(
        query_states, key_states, cos, sin
    )
    query_states = query_states.transpose(0, 1).unsqueeze(0)
    key_states = key_states.transpose(0, 1).unsqueeze(0)
    value_states = value_states.transpose(0, 1).unsqueeze(0)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, modeling.eager_attention_forward
    )
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    attn_output = attention_by_length(
        attention,
        self,
        query_states,
        key_states,
        value_states,
        lengths,
        dropout=0.0 if not self.training else self.attention_dropout,
        **kwargs,
    )
    attn_output = attn_output.reshape(seq_length, -1).contiguous()
    return self.proj(attn_output)
