"""No library code names a bare ``"cuda"`` device: under ``accelerate launch`` it is GPU 0 on
every process (and in every worker thread), so each process must use its own device,
``paco_reward.devices.default_device()`` / ``resolve_device(...)``, which carry the index.

The walker reads the source of the installed packages with :mod:`ast` (not grep), so a
docstring or comment that mentions "cuda" and a comparison such as ``device.type ==
"cuda"`` pass, while ``torch.device("cuda")``, ``.to("cuda")``, a ``"cuda"`` default, ``x
or "cuda"``, ``"cuda" if ... else ...`` and an index-less ``.cuda()`` are findings, given
as ``file:line``.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PACKAGES = ("paco_reward", "paco_grpo", "data_pipeline", "benchmarks", "demo")
FIX = "use paco_reward.devices.resolve_device(...) / default_device() (they add the index)"

# Calls whose first positional argument is a device *type*, not a device.
_DEVICE_TYPE_CALLS = {"autocast", "GradScaler", "get_device_module"}


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_device_type_use(node: ast.Constant, parent: ast.AST, grand: ast.AST | None) -> bool:
    """Whether the string ``"cuda"`` at ``node`` names a device type, not a device."""
    if isinstance(parent, (ast.Compare, ast.MatchValue)):  # device.type == "cuda"
        return True
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)) and isinstance(grand, ast.Compare):
        return True  # device.type in ("cuda", "mps")
    if isinstance(parent, ast.keyword):
        return parent.arg == "device_type"
    if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node:
        name = _call_name(parent)
        if name in _DEVICE_TYPE_CALLS:
            return True
        # torch.device("cuda", index): the index is given
        has_index = len(parent.args) > 1 or any(k.arg == "index" for k in parent.keywords)
        return name == "device" and has_index
    if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
        return True  # a mapping keyed by device type
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    return isinstance(parent, ast.Expr)  # a bare string statement


def _context(node: ast.AST, parent: ast.AST) -> str:
    if isinstance(parent, ast.Call):
        return f"argument of {_call_name(parent) or 'a call'}()"
    if isinstance(parent, ast.keyword):
        return f"{parent.arg}= argument"
    if isinstance(parent, ast.arguments):
        return "default of a parameter"
    if isinstance(parent, ast.IfExp):
        return '"cuda" if ... else ...'
    if isinstance(parent, ast.BoolOp):
        return '... or "cuda"'
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        return "assigned"
    if isinstance(parent, ast.Return):
        return "returned"
    return f"in a {type(parent).__name__}"


def bare_cuda_findings(source: str, filename: str = "<string>") -> list[str]:
    """``file:line: what`` for every bare ``"cuda"`` device and index-less ``.cuda()`` call.

    Example:
        >>> bare_cuda_findings('model.to("cuda")\\nok = device.type == "cuda"\\n', "m.py")
        ['m.py:1: "cuda" as a device (argument of to())']
    """
    tree = ast.parse(source, filename)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    findings = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "cuda":
            parent = parents[node]
            if not _is_device_type_use(node, parent, parents.get(parent)):
                findings.append((node.lineno, f'"cuda" as a device ({_context(node, parent)})'))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "cuda"
            and not node.args
            and not node.keywords
        ):
            findings.append((node.lineno, ".cuda() without a device index"))
    return [f"{filename}:{line}: {what}" for line, what in sorted(findings)]


def _package_files(package: str) -> dict[Path, str]:
    """``{file: name shown}`` for the package's sources, named from the package's folder."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"package {package!r} is not importable; install paco-rl (make environments).")
    files = {}
    for root in map(Path, spec.submodule_search_locations):
        for path in root.rglob("*.py"):
            if "__pycache__" not in path.parts:
                files[path] = str(path.relative_to(root.parent))
    return dict(sorted(files.items()))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_bare_cuda_device_in_the_package(package):
    files = _package_files(package)
    assert files, f"no Python files found for {package!r}"
    findings = [
        finding
        for path, shown in files.items()
        for finding in bare_cuda_findings(path.read_text(encoding="utf-8"), shown)
    ]
    assert not findings, f"bare CUDA devices ({FIX}):\n" + "\n".join(findings)


# ---------------------------------------------------------------------- the walker itself
@pytest.mark.parametrize(
    "snippet, what",
    [
        ('torch.device("cuda")', "argument of device()"),
        ('x.to("cuda")', "argument of to()"),
        ('x.to(device="cuda")', "device= argument"),
        ('def f(device="cuda"): ...', "default of a parameter"),
        ('def f(*, device="cuda"): ...', "default of a parameter"),
        ('d = "cuda" if torch.cuda.is_available() else "cpu"', '"cuda" if ... else ...'),
        ('d = device or "cuda"', '... or "cuda"'),
        ('DEVICE = "cuda"', "assigned"),
        ('class C:\n    device: str = "cuda"', "assigned"),
        ('parser.add_argument("--device", default="cuda")', "default= argument"),
        ("model.cuda()", ".cuda() without a device index"),
    ],
)
def test_walker_finds_each_bare_cuda_device(snippet, what):
    (finding,) = bare_cuda_findings(snippet, "m.py")
    assert finding.startswith(f"m.py:{snippet.count(chr(10)) + 1}: ")
    assert what in finding


@pytest.mark.parametrize(
    "snippet",
    [
        'ok = device.type == "cuda"',
        'ok = torch.device(d).type != "cuda"',
        'ok = device.type in ("cuda", "mps")',
        'torch.device("cuda", local_rank)',
        'torch.device("cuda", index=local_rank)',
        'torch.autocast("cuda", dtype=torch.bfloat16)',
        'torch.autocast(device_type="cuda")',
        'x.to(f"cuda:{rank}")',
        'x.to("cuda:1")',
        "x.cuda(rank)",
        "x.cuda(device=rank)",
        "torch.cuda.synchronize()",
        'def f():\n    """Runs on "cuda" when available."""\n',
        '# x.to("cuda")\nx = 1',
        'match device.type:\n    case "cuda":\n        pass',
        'dtypes = {"cuda": "bfloat16", "cpu": "float32"}',
    ],
)
def test_walker_allows_device_types_indices_and_text(snippet):
    assert bare_cuda_findings(snippet, "m.py") == []
