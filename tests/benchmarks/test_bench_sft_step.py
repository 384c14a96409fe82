"""``benchmarks.sft_step``'s meter counts what autograd itself saves for the backward."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from benchmarks.sft_step import SavedActivationMeter, checkpointed_peak


class _Blocks(torch.nn.Module):
    """Two blocks (linear, then tanh: its output is saved) and a square outside them."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(2)
        )
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x * x


def test_the_meter_counts_each_saved_storage_once_and_frees_it():
    torch.manual_seed(0)
    model = _Blocks(checkpointed=False)
    x = torch.randn(4, 8, requires_grad=True)  # 128 bytes a tensor of this shape
    with SavedActivationMeter(model, model.blocks) as meter:
        y = model(x)
        held_after_forward = meter.current
        y.sum().backward()
    # block 0 saves x (its linear's input) and its tanh's output; block 1 saves only its
    # tanh's output (its linear's input is block 0's, already held); the square saves its
    # operand twice, one storage; the weights are not counted
    assert meter.by_block == {0: 256, 1: 128}
    assert held_after_forward == meter.peak == 384
    assert meter.current == 0 and not meter.held  # the backward freed everything
    assert x.grad is not None


def test_with_checkpointing_the_recompute_is_added_to_what_is_held_then():
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    meters = {}
    for checkpointed in (False, True):
        model = _Blocks(checkpointed)
        with SavedActivationMeter(model, model.blocks) as meters[checkpointed]:
            model(x).sum().backward()
    plain, ckpt = meters[False], meters[True]
    # the forward holds each block's input and the square's operand, nothing inside blocks
    assert ckpt.peak == 3 * 128
    # block 1 is recomputed first, its input and block 0's held (the square's freed), then
    # block 0 with only its own input left
    assert ckpt.at_recompute == {1: 256, 0: 128}
    assert checkpointed_peak(ckpt, plain) == max(384, 256 + 128, 128 + 256) == 384
