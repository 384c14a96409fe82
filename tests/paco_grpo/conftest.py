"""Fixtures for the paco_grpo tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """The tiny FLUX runs fastest single-threaded; on a shared 2-core machine more threads only
    add contention (a 2-epoch CLI run takes 6 s with one thread, 22 s with two under load).
    Results do not depend on the thread count here (checked on the learning run)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
