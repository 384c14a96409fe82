"""One error family: every error the three packages raise on purpose is a ``PacoError`` that
also derives from the builtin a caller expects, and the docs' Errors page lists each class.

The raise walker reads the source with :mod:`ast` (not grep): ``raise ValueError(...)``,
``raise RuntimeError``, ``raise PacoError(...)`` (the bare base) and any other builtin
exception class raised by name are findings, given as ``file:line``, except the few
protocol uses in :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from paco_reward.errors import (
    ConfigError,
    InputError,
    InputTypeError,
    PacoError,
    PathNotFoundError,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("paco_reward", "paco_grpo", "data_pipeline")
ERRORS_PAGE = ROOT / "docs" / "api" / "errors.md"
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
FIX = (
    "raise a PacoError subclass that derives from the same builtin (paco_reward.errors: "
    "ConfigError for a config field, InputError / InputTypeError for an argument, ...)"
)


# ---------------------------------------------------------------------- the raise walker
def _is_abstract(function: ast.AST) -> bool:
    """A function whose body is only (a docstring and) ``raise NotImplementedError``."""
    body = list(getattr(function, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _is_main_guard(node: ast.AST) -> bool:
    """``if __name__ == "__main__":``."""
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


# Builtins raised by name on purpose, each where its protocol asks for it: a predicate of the
# raise, the statement that holds it and the function that holds it.
ALLOWED = {
    # An abstract method: subclasses implement it (the body is only the raise).
    "NotImplementedError": lambda raise_, parent, function: (
        parent is function and _is_abstract(function)
    ),
    # PEP 562: a module's ``__getattr__`` must raise AttributeError for an unknown name.
    "AttributeError": lambda raise_, parent, function: (
        getattr(function, "name", "") == "__getattr__"
    ),
    # ``raise SystemExit(main())`` under ``if __name__ == "__main__":``: the exit status.
    "SystemExit": lambda raise_, parent, function: _is_main_guard(parent),
    # Code that cannot run (after a retry loop that returns or raises): a bug if it does.
    "AssertionError": lambda raise_, parent, function: (
        isinstance(raise_.exc, ast.Call)
        and [getattr(a, "value", None) for a in raise_.exc.args] == ["unreachable"]
    ),
}


def bare_raises(source: str, filename: str = "<source>") -> list[str]:
    """``line: code`` of each raise of a builtin exception class (or of ``PacoError`` itself)
    by name that :data:`ALLOWED` does not allow; re-raises (``raise``, ``raise err``,
    ``raise self._exhausted(...)``) are not findings."""
    tree = ast.parse(source, filename=filename)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    findings = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        name = target.id if isinstance(target, ast.Name) else None
        if name not in BUILTIN_EXCEPTIONS and name != "PacoError":
            continue
        parent = function = parents[node]
        while function in parents and not isinstance(
            function, (ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            function = parents[function]
        if name in ALLOWED and ALLOWED[name](node, parent, function):
            continue
        findings.append((node.lineno, ast.get_source_segment(source, node).splitlines()[0]))
    return [f"{line}: {code}" for line, code in sorted(findings)]


def test_the_walker_finds_bare_raises_and_allows_only_the_protocol_ones():
    source = '''
def f(x):
    if x:
        raise ValueError(f"bad {x}")
    raise RuntimeError
def g():
    raise PacoError("the base, not a category")
def h():
    raise KeyError("k")
def i():
    raise NotImplementedError("not abstract: there is code after the check")
    return 1
class A:
    def abstract(self):
        """Subclasses implement it."""
        raise NotImplementedError
def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
def attribute():
    raise AttributeError("not in a module's __getattr__")
def retry():
    try:
        return send()
    except TransientError as err:
        raise self._exhausted(err) from None
    except OSError:
        raise
    raise AssertionError("unreachable")
if __name__ == "__main__":
    raise SystemExit(main())
raise ConfigError("typed")
'''
    lines = [int(f.split(":")[0]) for f in bare_raises(source)]
    assert lines == [4, 5, 7, 9, 11, 21]


def _sources():
    for package in PACKAGES:
        yield from sorted((ROOT / package).rglob("*.py"))


def test_no_bare_builtin_raise_in_the_packages():
    """On the code before the family was kept (commit 045c17a) this flags 176 raises: 146
    ValueError, 10 RuntimeError, 7 TypeError, 5 FileNotFoundError, 3 ImportError, 2 KeyError,
    1 TimeoutError, 1 NotImplementedError outside an abstract method and 1 bare
    ``PacoError``."""
    findings = [
        f"{path.relative_to(ROOT)}:{finding}"
        for path in _sources()
        for finding in bare_raises(path.read_text(), str(path))
    ]
    assert not findings, f"{len(findings)} bare raise(s); {FIX}:\n" + "\n".join(findings)


# ---------------------------------------------------------------------- the classes
def _error_classes() -> list[type]:
    """Every exception class the three packages define (all their modules imported)."""
    found = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        modules = [root] + [
            importlib.import_module(info.name)
            for info in pkgutil.walk_packages(root.__path__, f"{package}.")
        ]
        for module in modules:
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, BaseException)
                    and value.__module__.split(".")[0] in PACKAGES
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


def builtin_bases(cls: type) -> set[str]:
    """The builtins ``cls`` derives from directly or through the library's classes, not
    counting ``Exception`` (a ``PathNotFoundError`` is a ``FileNotFoundError`` and a
    ``ValueError``)."""
    return {
        base.__name__
        for klass in cls.__mro__
        if klass.__module__ != "builtins"
        for base in klass.__bases__
        if base.__module__ == "builtins" and base not in (Exception, BaseException, object)
    }


@pytest.fixture(scope="module")
def error_classes() -> list[type]:
    return _error_classes()


def test_every_error_class_is_a_documented_paco_error_with_a_builtin_base(error_classes):
    assert len(error_classes) > 30  # every module was walked
    problems = []
    for cls in error_classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        if not issubclass(cls, PacoError):
            problems.append(f"{name} is not a PacoError")
        if cls is not PacoError and not builtin_bases(cls):
            problems.append(f"{name} derives from no builtin a caller would catch")
        if not (cls.__dict__.get("__doc__") or "").strip():
            problems.append(f"{name} has no docstring (what it means, what raises it)")
    assert not problems, "\n".join(problems)


def _page_rows() -> dict[str, set[str]]:
    """``{class name: {builtin bases}}`` from the table of the Errors page."""
    rows = {}
    for line in ERRORS_PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(\w+)`", cells[0]) if len(cells) > 2 else None
        if match:
            rows[match.group(1)] = set(re.findall(r"`(\w+)`", cells[1]))
    return rows


def test_the_errors_page_lists_every_class_with_its_builtins_and_renders_it(error_classes):
    rows = _page_rows()
    expected = {cls.__name__: builtin_bases(cls) or {"Exception"} for cls in error_classes}
    assert rows == expected
    directives = set(re.findall(r"^:::\s+([\w.]+)", ERRORS_PAGE.read_text(), re.MULTILINE))
    missing = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in error_classes
        if f"{cls.__module__}.{cls.__qualname__}" not in directives
        and f"paco_reward.{cls.__name__}" not in directives
    }
    assert not missing, f"add '::: NAME' to {ERRORS_PAGE.relative_to(ROOT)} for {missing}"


def test_the_errors_page_example_runs(capsys):
    (code,) = re.findall(r"```python\n(.*?)```", ERRORS_PAGE.read_text(), re.DOTALL)
    exec(compile(code, str(ERRORS_PAGE), "exec"), {})
    assert "PathNotFoundError: No model folder exists at '/data/no-such-model'" in (
        capsys.readouterr().out
    )


# ---------------------------------------------------------------------- the builtins kept
@pytest.mark.parametrize(
    "cls, builtin",
    [
        (ConfigError, ValueError),
        (InputError, ValueError),
        (InputTypeError, TypeError),
        (PathNotFoundError, FileNotFoundError),
        (PathNotFoundError, ValueError),
    ],
)
def test_existing_except_clauses_keep_catching(cls, builtin):
    with pytest.raises(builtin) as info:
        raise cls("message")
    assert isinstance(info.value, PacoError) and str(info.value) == "message"
