"""The test registration of every generator: what the registry-wide tests
(``test_grpo_pipelines.py``, ``test_grpo_launch.py``) need beyond the pipeline's
:class:`~paco_grpo.pipelines.PipelineSpec`, read from beside its tiny builder (the builder's
module's ``TEST_CASES``, :class:`~paco_grpo.testing.cases.TinyCase`): a new model's file,
builder and recipes are all its tests need."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import pytest

from paco_grpo.pipelines import PIPELINE_SPECS, get_pipeline_spec
from paco_grpo.testing.cases import TinyCase


def tiny_case(name: str) -> TinyCase | None:
    """Pipeline ``name``'s test case, from its tiny builder's module (``None``: it has none,
    which ``test_every_registered_pipeline_has_a_test_case_a_tiny_recipe_and_a_real_one``
    reports)."""
    module = importlib.import_module(get_pipeline_spec(name).tiny_builder.partition(":")[0])
    return getattr(module, "TEST_CASES", {}).get(name)


TINY = {name: case for name in PIPELINE_SPECS if (case := tiny_case(name)) is not None}


@pytest.fixture(scope="session")
def tiny_pipeline_dir(tmp_path_factory):
    """``tiny_pipeline_dir(name)``: the folder of pipeline ``name``'s tiny model (its spec's
    tiny builder, seed 0), built once per session on first use."""
    root = tmp_path_factory.mktemp("tiny-pipelines")

    @functools.cache
    def build(name: str) -> Path:
        return get_pipeline_spec(name).build_tiny(root / name, seed=0)

    return build


@pytest.fixture(scope="session")
def tiny() -> dict[str, TinyCase]:
    """Pipeline name -> its :class:`~paco_grpo.testing.cases.TinyCase` (:data:`TINY`)."""
    return TINY
