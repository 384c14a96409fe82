"""Every example in the packages' docstrings runs and prints what it says (``doctest``), so
the API reference (built from those docstrings) shows code that works."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ("paco_reward", "paco_grpo", "data_pipeline")


def modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        path = importlib.import_module(package).__path__
        names += [m.name for m in pkgutil.walk_packages(path, prefix=f"{package}.")]
    return sorted(names)


@pytest.mark.parametrize("name", modules())
def test_docstring_examples_run(name, capsys):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, capsys.readouterr().out
