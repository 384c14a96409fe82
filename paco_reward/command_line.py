"""One command-line dialect for every ``paco-*`` command and benchmark, generated from
dataclasses (as trl's ``TrlParser`` does with ``HfArgumentParser``).

Each command is a dataclass of its arguments: every field becomes ``--field_name`` (also
``--field-name``), its ``metadata["help"]`` the help text, nested dataclass fields dotted
flags (``--train.resolution``), and fields marked ``positional=True`` positional
arguments. A value on the command line is read as YAML, exactly like the same key in a
recipe (``--rewards "{clip_t: 1.0}"``, ``--noise_steps 1 2``, ``--flag`` / ``--flag false``
/ ``--no_flag`` / ``--no-flag``); a plain ``str`` field keeps its text; a list flag given
twice adds to the list (``--scorer a --scorer b``); a field without a default is a required
flag. One entry of a mapping field is set alone with a dotted flag
(``--reward_kwargs.consistency.server_url http://127.0.0.1:8001/v1``), the rest of the
mapping kept. A command with ``recipe=True`` takes a YAML file of its fields first; flags
override it (and may leave out what the file gives).

Exit codes: 0 done, 1 an error (one line naming the input, no traceback; ``-v`` shows it),
2 a usage error (argparse). ``-v`` logs INFO, ``-vv`` DEBUG.

    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class Hello:
    ...     name: str = field(metadata={"help": "who", "positional": True})
    ...     times: int = field(default=1, metadata={"help": "how often"})
    >>> parse_config(Hello, ["world", "--times", "2"])
    Hello(name='world', times=2)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import logging
import re
import sys
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from paco_reward.errors import ConfigError

__all__ = [
    "Command",
    "check_recipe_inputs",
    "config_field",
    "mapping_fields",
    "parse_config",
    "run_cli",
    "split_entry_flags",
]

logger = logging.getLogger(__name__)


def config_field(default: Any = dataclasses.MISSING, *, help: str, positional: bool = False,
                 nargs: str | None = None, **kwargs) -> Any:  # fmt: skip
    """A dataclass field with its command-line help (``positional``/``nargs`` for positionals).

    Example:
        >>> f = config_field("2x2", help="grid layout")
    """
    metadata = {"help": help, "positional": positional}
    if nargs is not None:
        metadata["nargs"] = nargs
    if callable(default) and not isinstance(default, (str, int, float, bool)):
        return dataclasses.field(default_factory=default, metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


@dataclass
class Command:
    """A subcommand: its name, its arguments' dataclass and what runs it.

    ``run(config)`` returns an exit code (``None`` = 0). With ``recipe=True`` the command
    first takes a YAML file of the dataclass's fields; with ``recipe="optional"`` it may
    (flags alone are a full command line). ``config_cls`` may be a function returning the
    class, so a heavy import happens only when that command runs. With ``reads_inputs=True``
    (a trainer) a folder the config names that does not exist and that the recipe's first
    line builds is refused naming that command (:func:`check_recipe_inputs`).
    """

    name: str
    config_cls: type | Callable[[], type]
    run: Callable[[Any], int | None]
    help: str
    recipe: bool | str = False
    reads_inputs: bool = False

    def resolve(self) -> type:
        cls = self.config_cls
        return cls if isinstance(cls, type) else cls()


# ---------------------------------------------------------------------- help text
_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def plain_text(text: str) -> str:
    """``text`` (a docstring or help string written in reStructuredText) as a terminal shows
    it: roles reduced to their last name, ``literals`` to their text.

    Example:
        >>> plain_text("``paco-reward``: see :class:`~paco_reward.PacoReward` and :mod:`a.b`")
        'paco-reward: see PacoReward and a.b'
    """

    def role(match: re.Match) -> str:
        target = match.group(1).strip()
        return target.rsplit(".", 1)[-1] if match.group(0).count("~") else target

    return _ROLE.sub(role, text).replace("``", "")


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``choices`` to a mistyped ``word``, else ``""``.

    Example:
        >>> did_you_mean("--max_step", ["--max_steps", "--seed"])
        " (did you mean '--max_steps'?)"
        >>> did_you_mean("--zzz", ["--max_steps"])
        ''
    """
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse as every ``paco-*`` command uses it: no abbreviations (``--max_step`` is not
    ``--max_steps``: a typo must not silently pick a flag), plain-text descriptions, and a
    "did you mean" for a mistyped flag or subcommand."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        if kwargs.get("description"):
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        if message.startswith("unrecognized arguments:"):
            flags = [o for o in self._option_string_actions if o.startswith("--")]
            for word in message.split(":", 1)[1].split():
                if word.startswith("-"):
                    message += did_you_mean(word.partition("=")[0], flags)
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            names = re.findall(r"'([^']*)'", choice.group(2))
            message += did_you_mean(choice.group(1), names)
        super().error(message)


# ---------------------------------------------------------------------- types
def _unwrap_optional(tp):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
        return tp, True
    return tp, False


def _yaml_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _string_or_none(text: str) -> str | None:
    return None if text in ("null", "None", "~") else text


def _to_bool(text: str) -> bool:
    value = _yaml_value(text)
    if not isinstance(value, bool):
        raise argparse.ArgumentTypeError(f"expected true or false; got {text!r}")
    return value


def _union_members(tp) -> tuple:
    """The members of a ``Union`` / ``X | Y`` annotation (``None`` left out); ``()`` otherwise."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(tp) if a is not type(None))
    return ()


def _text_in_union(members: tuple, optional: bool) -> Callable[[str], Any]:
    """An argparse ``type`` for a union that takes a string, such as transformers'
    ``IntervalStrategy | str``: the text stays text (``--eval_strategy no`` is ``"no"``, not
    YAML's ``False``); a number only where the union takes one; ``null`` where optional."""

    def convert(text: str):
        if optional and text in ("null", "None", "~"):
            return None
        value = _yaml_value(text)
        if isinstance(value, bool):
            return text
        if (
            isinstance(value, int)
            and int in members
            or isinstance(value, float)
            and float in members
        ):
            return value
        if isinstance(value, list) and any(typing.get_origin(m) is list for m in members):
            return value
        return text

    return convert


def words_for_strings(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with a YAML boolean given to a field that takes a string but no bool turned
    back into its word: PyYAML reads ``save_strategy: no`` as ``False``, which transformers'
    ``"no"`` strategy cannot be told from otherwise.

    Example:
        >>> from paco_reward.training import PacoSFTConfig
        >>> words_for_strings(PacoSFTConfig, {"save_strategy": False, "bf16": False})
        {'save_strategy': 'no', 'bf16': False}
    """
    types_ = {f.name: f.type for f in dataclasses.fields(cls)}
    out = dict(values)
    for name, value in values.items():
        members = _union_members(types_.get(name))
        if isinstance(value, bool) and str in members and bool not in members:
            out[name] = "yes" if value else "no"
    return out


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _default_text(f: dataclasses.Field) -> str | None:
    """How ``--help`` shows ``f``'s default (None: it has none)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        try:
            value = f.default_factory()
        except Exception:  # a factory that needs more than nothing: say nothing
            return None
    else:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple, dict)) and not value:
        return "none" if isinstance(value, (list, tuple)) else "{}"
    if isinstance(value, enum.Enum):
        value = value.value
    text = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= 60 else None


def _help_with_default(f: dataclasses.Field) -> str:
    """The field's help, with its default where the help does not already say it."""
    help_text = plain_text(f.metadata.get("help", "") or "").replace("%", "%%")
    default = _default_text(f)
    if default is None or "default" in help_text.lower() or f.metadata.get("positional"):
        return help_text
    return f"{help_text.rstrip()} (default: {default})".lstrip()


def _number(kind: type, optional: bool) -> Callable[[str], Any]:
    """An argparse ``type`` reading an int or a float (``null`` too when ``optional``), so
    that ``--limit two`` is a usage error rather than a failure later on."""

    def convert(text: str):
        value = _yaml_value(text)
        if value is None and optional:
            return None
        if isinstance(value, bool):
            pass
        elif isinstance(value, kind) or (kind is float and isinstance(value, int)):
            return kind(value)
        elif kind is float:
            try:
                return float(text)  # "1e-4": YAML 1.1 wants a dot for a float
            except ValueError:
                pass
        raise argparse.ArgumentTypeError(f"expected {kind.__name__}; got {text!r}")

    return convert


def _item_kind(tp) -> str:
    return "str" if tp in (str, Path) else "yaml"


def argument_spec(f: dataclasses.Field, tp, prefix: str = "", required: bool = True) -> dict:
    """How the command line reads field ``f`` (annotation ``tp``, ``prefix`` its dotted
    section), as plain data: what :func:`add_argument_spec` builds an option from. Kept as
    data so that a command's options can be built without importing its config class
    (:func:`run_cli`'s argument cache).

    Example:
        >>> f = config_field(8000, help="TCP port.")
        >>> f.name = "port"
        >>> spec = argument_spec(f, int)
        >>> spec["kind"], spec["help"]
        ('int', 'TCP port. (default: 8000)')
    """
    inner, optional = _unwrap_optional(tp)
    origin = typing.get_origin(inner)
    spec: dict[str, Any] = {"name": prefix + f.name, "help": _help_with_default(f)}
    if f.metadata.get("positional"):
        item = (typing.get_args(inner) or (str,))[0] if origin is list else inner
        spec.update(kind="positional", item=_item_kind(item))
        if f.metadata.get("nargs"):
            spec["nargs"] = f.metadata["nargs"]
        elif _has_default(f):
            spec["nargs"] = "?"
        return spec
    spec["required"] = bool(required and not _has_default(f))
    if inner is bool:
        spec.update(kind="bool", negatable=not prefix)
        return spec
    if origin is list:  # repeating the flag adds to the list (--scorer a --scorer b)
        (item,) = typing.get_args(inner) or (str,)
        spec.update(kind="list", item="str" if item is str else "yaml")
    elif inner in (str, Path):
        spec.update(kind="str", optional=optional)
    elif inner in (int, float):
        spec.update(kind=inner.__name__, optional=optional)
    elif str in _union_members(inner):
        members = _union_members(inner)
        takes = [k.__name__ for k in (int, float) if k in members]
        takes += ["list"] * any(typing.get_origin(m) is list for m in members)
        spec.update(kind="union", optional=optional, takes=takes)
        words = [e.value for m in members if isinstance(m, type) and issubclass(m, enum.Enum)
                 for e in m if isinstance(e.value, str)]  # fmt: skip
        if words:  # transformers' strategies and schedulers: say which words it takes
            spec["help"] += f" (choices: {', '.join(words)})"
    else:
        spec["kind"] = "yaml"
    if typing.get_origin(inner) is typing.Literal:
        spec["choices"] = list(typing.get_args(inner))
    return spec


def _union_type(spec: dict) -> Callable[[str], Any]:
    members = tuple({"int": int, "float": float, "list": list[str]}[k] for k in spec["takes"])
    return _text_in_union((str, *members), spec["optional"])


def add_argument_spec(parser: argparse.ArgumentParser, spec: dict) -> None:
    """Add the option (or positional) :func:`argument_spec` describes to ``parser``."""
    name, help_text, kind = spec["name"], spec["help"], spec["kind"]
    if kind == "positional":
        kwargs: dict[str, Any] = {"help": help_text, "type": str if spec["item"] == "str" else _yaml_value}
        if "nargs" in spec:
            kwargs["nargs"] = spec["nargs"]
        parser.add_argument(name, **kwargs)
        return
    flags = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    kwargs = {"dest": name, "help": help_text, "default": argparse.SUPPRESS}
    if spec["required"]:  # a missing value is a usage error (exit 2)
        kwargs["required"] = True
    if kind == "bool":
        kwargs.update(nargs="?", const=True, type=_to_bool, metavar="true|false")
        parser.add_argument(*flags, **kwargs)
        if spec["negatable"]:
            negations = [f"--no_{name}", f"--no-{name.replace('_', '-')}"]
            parser.add_argument(*negations, dest=name, action="store_const", const=False,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # fmt: skip
        return
    if kind == "list":
        kwargs.update(action="extend", nargs="*", type=str if spec["item"] == "str" else _yaml_value)
    elif kind == "str":
        kwargs["type"] = _string_or_none if spec["optional"] else str
    elif kind in ("int", "float"):
        kwargs["type"] = _number(int if kind == "int" else float, spec["optional"])
    elif kind == "union":
        kwargs["type"] = _union_type(spec)
    else:
        kwargs["type"] = _yaml_value
    if "choices" in spec:
        kwargs["choices"] = spec["choices"]
    parser.add_argument(*flags, **kwargs)


def dataclass_argument_specs(cls: type, prefix: str = "", required: bool = True) -> list[dict]:
    """:func:`argument_spec` of every field of ``cls`` (nested dataclass fields dotted)."""
    hints = typing.get_type_hints(cls)
    specs: list[dict] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints.get(f.name, str)
        inner, _ = _unwrap_optional(tp)
        if dataclasses.is_dataclass(inner):
            specs += dataclass_argument_specs(inner, f"{prefix}{f.name}.", required)
        else:
            specs.append(argument_spec(f, tp, prefix, required))
    return specs


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type, prefix: str = "",
                            required: bool = True) -> None:  # fmt: skip
    """Add one option per field of ``cls`` (nested dataclass fields as dotted options).

    With ``required``, a field without a default is a required option (``False`` when a
    recipe may give it)."""
    for spec in dataclass_argument_specs(cls, prefix, required):
        add_argument_spec(parser, spec)


def mapping_fields(cls: type, prefix: str = "") -> list[str]:
    """The dotted names of ``cls``'s fields that hold a mapping (``dict``), nested sections
    included: those whose entries a dotted flag may set one by one.

    Example:
        >>> from dataclasses import make_dataclass
        >>> Recipe = make_dataclass("Recipe", [("seed", int), ("kwargs", dict)])
        >>> mapping_fields(Recipe)
        ['kwargs']
    """
    hints = typing.get_type_hints(cls)
    names = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        inner, _ = _unwrap_optional(hints.get(f.name, str))
        if dataclasses.is_dataclass(inner):
            names += mapping_fields(inner, f"{prefix}{f.name}.")
        elif inner is dict or typing.get_origin(inner) is dict:
            names.append(prefix + f.name)
    return names


def split_entry_flags(cls: type, argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """``argv`` without the flags that set one entry of a mapping field of ``cls``
    (``--reward_kwargs.consistency.server_url URL`` or ``--name.key=VALUE``), and those
    entries as ``{"dotted.key": value}`` (the value read as YAML), in the order given.

    Raises:
        ConfigError: for such a flag without a value.

    Example:
        >>> from dataclasses import make_dataclass
        >>> Recipe = make_dataclass("Recipe", [("seed", int), ("reward_kwargs", dict)])
        >>> split_entry_flags(Recipe, ["--reward_kwargs.clip_t.model", "m", "--seed", "1"])
        (['--seed', '1'], {'reward_kwargs.clip_t.model': 'm'})
    """
    return _split_entries(mapping_fields(cls), argv)


def _split_entries(mappings: Sequence[str], argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    mappings = sorted(mappings, key=len, reverse=True)  # the longest name first
    rest: list[str] = []
    entries: dict[str, Any] = {}
    args = iter(argv)
    for arg in args:
        if arg == "--":  # what follows is no option
            rest += [arg, *args]
            break
        flag, has_value, value = arg.partition("=")
        path = flag[2:] if flag.startswith("--") else ""
        field_name = next(
            (m for m in mappings if path[: len(m) + 1].replace("-", "_") == f"{m}."), None
        )
        if field_name is None or len(path) == len(field_name) + 1:
            rest.append(arg)
            continue
        if not has_value:
            value = next(args, None)
            if value is None or value.startswith("--"):
                raise ConfigError(f"{flag} sets one entry of {field_name}: it needs a value.")
        entries[field_name + path[len(field_name) :]] = _yaml_value(value)
    return rest, entries


def _parse(parser: argparse.ArgumentParser, mappings: Sequence[str],
           argv: Sequence[str], usage_parser: argparse.ArgumentParser | None = None,
           ) -> argparse.Namespace:  # fmt: skip
    """``parser.parse_args`` of ``argv`` with the mapping-entry flags (of the fields named
    ``mappings``) set on the namespace as dotted names, after the other flags: an entry wins
    over its whole mapping. An unrecognised argument is reported with ``usage_parser``'s usage
    (the subcommand's, not the program's)."""
    usage_parser = usage_parser or parser
    try:
        rest, entries = _split_entries(mappings, argv)
    except ConfigError as err:
        usage_parser.error(str(err))
    namespace, extras = parser.parse_known_args(rest)
    if extras:
        usage_parser.error("unrecognized arguments: " + " ".join(extras))
    for key, value in entries.items():
        setattr(namespace, key, value)
    return namespace


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each ``{"dotted.key": value}`` set (a value replaces, never merges).

    Example:
        >>> apply_overrides({"train": {"a": 1, "b": 2}, "r": {"x": 1}}, {"train.a": 3, "r": {"y": 2}})
        {'train': {'a': 3, 'b': 2}, 'r': {'y': 2}}
    """
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in values.items()}
    for key, value in overrides.items():
        target = out
        *parents, leaf = key.split(".")
        for parent in parents:
            target = target.setdefault(parent, {})
            if not isinstance(target, dict):
                raise ConfigError(f"override {key!r}: {parent!r} is not a section.")
        target[leaf] = value
    return out


def _is_float_type(tp) -> bool:
    if isinstance(tp, str):  # a postponed annotation
        return tp.replace(" ", "") in ("float", "float|None", "Optional[float]", "None|float")
    inner, _ = _unwrap_optional(tp)
    return inner is float


def coerce_floats(cls: type, values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``values`` with a string given to a float field of ``cls`` read as the number: YAML 1.1
    (PyYAML) reads ``5e-4``, without a dot, as a string. Others are left to ``cls`` to check.

    Raises:
        ValueError: naming the key, when such a string is not a number.

    Example:
        >>> from paco_reward.training import PacoSFTConfig
        >>> coerce_floats(PacoSFTConfig, {"learning_rate": "5e-4"})
        {'learning_rate': 0.0005}
    """
    types_ = {f.name: f.type for f in dataclasses.fields(cls)}
    out = dict(values)
    for name, value in values.items():
        if isinstance(value, str) and name in types_ and _is_float_type(types_[name]):
            try:
                out[name] = float(value)
            except ValueError:
                raise ConfigError(f"{prefix}{name} must be a number; got {value!r}.") from None
    return out


# Up to this many valid keys are listed in full; more get the closest ones and a pointer.
LISTED_KEYS = 30


def unknown_keys_message(where: str, unknown: Sequence[str], names: Sequence[str],
                         owner: str | None = None) -> str:  # fmt: skip
    """The error for mistyped keys: each with its closest valid key, the valid keys listed
    when they are few.

    Example:
        >>> unknown_keys_message("recipe", ["learnig_rate"], ["learning_rate", "seed"])
        "recipe: unknown key(s) ['learnig_rate'] (did you mean 'learning_rate'?); valid keys: ['learning_rate', 'seed']."
    """
    hints = "".join(
        did_you_mean(k.rsplit(".", 1)[-1], [n.rsplit(".", 1)[-1] for n in names]) for k in unknown
    )
    owner_text = f" for {owner}" if owner else ""
    if len(names) <= LISTED_KEYS:
        listed = f"valid keys: {sorted(names)}"
    else:
        listed = f"{len(names)} valid keys, listed by the command's --help and in docs/cli.md"
    return f"{where}: unknown key(s) {list(unknown)}{owner_text}{hints}; {listed}."


def config_from_mapping(cls: type, values: dict[str, Any], where: str = "arguments",
                        prefix: str = ""):  # fmt: skip
    """``cls(**values)``, refusing a key that is not a field of ``cls`` (named with ``prefix``,
    the dotted section it sits in) and reading YAML 1.1's strings of floats as numbers.

    Example:
        >>> @dataclass
        ... class Hello:
        ...     name: str
        >>> config_from_mapping(Hello, {"nmae": "world"})
        Traceback (most recent call last):
        ...
        paco_reward.errors.ConfigError: arguments: unknown key(s) ['nmae'] for Hello (did you mean 'name'?); valid keys: ['name'].
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix.rstrip('.') or where} must be a mapping; got {values!r}.")
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(
            unknown_keys_message(where, [prefix + k for k in unknown],
                                 sorted(prefix + n for n in names), cls.__name__)  # fmt: skip
        )
    return cls(**coerce_floats(cls, values, prefix))


def build_config(cls: type, values: dict[str, Any], where: str = "arguments"):
    """``cls`` from a mapping, refusing unknown keys; ``cls.from_dict`` when it has one (the
    configs that load from YAML, :class:`~paco_reward.yaml_config.YAMLConfig`)."""
    from_dict = getattr(cls, "from_dict", None)
    if callable(from_dict):
        return from_dict(values, where)
    return config_from_mapping(cls, values, where)


def read_recipe(path: str | Path) -> dict[str, Any]:
    """A YAML recipe as a mapping; ``ValueError`` naming the file when it is not one."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"No recipe file at {str(path)!r}.")
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise ConfigError(f"Recipe {str(path)!r} must be a mapping of config fields to values.")
    return values


def recipe_build_commands(path: str | Path) -> list[str]:
    """The commands a recipe's first comment line runs before the recipe's own command (the
    ones that build its inputs): ``# paco-grpo tiny-flux tiny_flux && paco-grpo train R``
    gives ``["paco-grpo tiny-flux tiny_flux"]``."""
    lines = Path(path).read_text().splitlines()
    if not lines or not lines[0].startswith("#"):
        return []
    steps = [step.strip() for step in lines[0].lstrip("#").split("&&")]
    return [s for s in steps if s.startswith("paco-") and Path(path).name not in s]


def _string_values(values: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted name, value) of every string in a nested mapping or list of a config."""
    if isinstance(values, dict):
        return [pair for k, v in values.items() for pair in _string_values(v, f"{prefix}{k}.")]
    if isinstance(values, (list, tuple)):
        return [pair for v in values for pair in _string_values(v, prefix)]
    return [(prefix.rstrip("."), values)] if isinstance(values, str) else []


def _positionals(command: str) -> list[str]:
    """The positional words of ``command`` after its program and subcommand (the folders it
    writes), not the flags nor their values."""
    import shlex

    words = shlex.split(command)[2:]
    return [w for i, w in enumerate(words) if not w.startswith("-")
            and not (i and words[i - 1].startswith("--") and "=" not in words[i - 1])]  # fmt: skip


def check_recipe_inputs(recipe: str | Path, config: Any) -> None:
    """Refuse a config naming a folder that does not exist and that ``recipe``'s first line
    builds (a tiny model, a synthetic export), naming that command: the loader would otherwise
    take a missing ``tiny_flux`` for a hub id and fail after the hub's retries, naming neither.

    Raises:
        PathNotFoundError: such a folder is missing.
    """
    from paco_reward.errors import PathNotFoundError

    commands = recipe_build_commands(recipe)
    if not commands:
        return
    plain = config.to_plain() if hasattr(config, "to_plain") else dataclasses.asdict(config)
    for name, value in _string_values(plain):
        if not value or Path(value).expanduser().exists():
            continue
        for command in commands:
            built = [w.rstrip("/") for w in _positionals(command)]
            if any(value.rstrip("/") == w or value.startswith(w + "/") for w in built):
                raise PathNotFoundError(
                    f"{name} {value!r} does not exist; recipe {str(recipe)!r} builds it with "
                    f"its first line's `{command}`: run that first (in this folder), or give "
                    f"--{name} an existing folder."
                )


def config_from_namespace(cls: type, namespace: argparse.Namespace, recipe: bool = False,
                          recipe_values: dict[str, Any] | None = None):  # fmt: skip
    """The config a parsed command line describes (recipe values under the flags;
    ``recipe_values`` the recipe file's, when already read)."""
    given = {k: v for k, v in vars(namespace).items() if not k.startswith("_")}
    given.pop("verbose", None)
    path = given.pop("recipe", None) if recipe else None
    if recipe_values is not None:
        values = recipe_values
    else:  # an optional recipe left out reads as an empty one
        values = read_recipe(path) if recipe and path is not None else {}
    positional = {f.name for f in dataclasses.fields(cls) if f.metadata.get("positional")}
    values = apply_overrides(values, {k: v for k, v in given.items() if k not in positional})
    values.update({k: given[k] for k in positional if k in given and given[k] is not None})
    return build_config(cls, words_for_strings(cls, values), "recipe" if recipe else "command line")


def parse_config(cls: type, argv: Sequence[str] | None = None, *, recipe: bool = False,
                 prog: str | None = None):  # fmt: skip
    """Parse ``argv`` into a ``cls`` (argparse exits with 2 on a usage error)."""
    parser = ArgumentParser(prog=prog, description=(cls.__doc__ or "").split("\n\n")[0])
    if recipe:
        _add_recipe_argument(parser, recipe)
    add_dataclass_arguments(parser, cls, required=not recipe)
    return config_from_namespace(cls, _parse(parser, mapping_fields(cls), argv), recipe)


def _configure_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)
    if not verbosity:  # the libraries' progress bars and expected warnings: -v shows them
        from paco_reward.quiet import quiet_libraries

        quiet_libraries()


def _packages(commands) -> tuple[str, ...]:
    """The top-level packages the commands' code comes from (what the argument cache's key
    covers), ``paco_reward`` always (this dialect)."""
    items = [commands] if callable(commands) else [c.run for c in commands]
    return tuple(sorted({"paco_reward", *(getattr(i, "__module__", "").split(".")[0] for i in items)} - {""}))


RECIPE_HELP = "YAML file of config fields; flags override it"


def _add_recipe_argument(parser: argparse.ArgumentParser, recipe: bool | str) -> None:
    if recipe == "optional":
        parser.add_argument("recipe", nargs="?", default=None, help=RECIPE_HELP + " (optional)")
    else:
        parser.add_argument("recipe", help=RECIPE_HELP)


def _check_recipe_keys(recipe: dict[str, Any], specs: list[dict], mappings: list[str]) -> None:
    """Refuse a recipe's unknown top-level key from the command's options alone (before its
    config class is imported); :func:`config_from_mapping` checks the sections later."""
    names = {spec["name"].split(".")[0] for spec in specs} | {m.split(".")[0] for m in mappings}
    unknown = sorted(set(recipe) - names - {"paco_rl_version"})
    if unknown:
        raise ConfigError(unknown_keys_message("recipe", unknown, sorted(names)))


def run_cli(prog: str, description: str,
            commands: Sequence[Command] | Callable[[], Sequence[Command]],
            argv: Sequence[str] | None = None) -> int:  # fmt: skip
    """Parse ``argv`` into one of ``commands``, run it and return the exit code.

    A single command is the whole program (no subcommand name); several are subcommands.
    ``commands`` may be a function returning them, called only once a command runs (or its
    options are not yet in the argument cache, :mod:`paco_reward.argument_cache`): ``--help``
    and usage errors then come before any heavy import.
    """
    from paco_reward import argument_cache

    argv = list(sys.argv[1:] if argv is None else argv)
    loaded: list[Command] = []

    def live() -> list[Command]:
        if not loaded:
            loaded.extend(commands() if callable(commands) else commands)
        return loaded

    parser = ArgumentParser(prog=prog, description=description)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log INFO (-vv: DEBUG); show tracebacks of errors")  # fmt: skip
    usage_parser = parser  # the parser whose usage a usage error shows
    specs: list[dict] = []
    mappings: list[str] = []
    if not callable(commands) and len(commands) == 1:
        (command,) = commands
        chosen_cls = command.resolve()
        if command.recipe:
            _add_recipe_argument(parser, command.recipe)
        add_dataclass_arguments(parser, chosen_cls, required=not command.recipe)
        mappings = mapping_fields(chosen_cls)
        recipe_command = command.recipe
    else:
        key = argument_cache.fingerprint(_packages(commands))
        entry = argument_cache.load_entry(prog, key)
        listing = entry.get("commands") if callable(commands) else None
        if not listing:
            listing = [[c.name, c.help, c.recipe] for c in live()]
            if callable(commands):
                argument_cache.store_entry(prog, key, {"commands": listing})
        sub = parser.add_subparsers(dest="_command", required=True, metavar="COMMAND",
                                    parser_class=ArgumentParser)  # fmt: skip
        chosen = next((a for a in argv if not a.startswith("-")), None)
        recipe_command = False
        for name, help_text, recipe in listing:
            help_text = plain_text(help_text)
            p = sub.add_parser(name, help=help_text, description=help_text)
            p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                           help="log INFO (-vv: DEBUG)")  # fmt: skip
            if name != chosen:  # only the chosen command's arguments are built
                continue
            usage_parser, recipe_command = p, recipe
            if recipe:
                _add_recipe_argument(p, recipe)
            cached = entry.get("arguments", {}).get(name)
            if cached is None:
                cls = next(c for c in live() if c.name == name).resolve()
                cached = {"specs": dataclass_argument_specs(cls, required=not recipe),
                          "mappings": mapping_fields(cls)}  # fmt: skip
                argument_cache.store_entry(prog, key, {"arguments": {name: cached}})
            specs, mappings = cached["specs"], cached["mappings"]
            for spec in specs:
                add_argument_spec(p, spec)
    namespace = _parse(parser, mappings, argv, usage_parser)
    verbosity = getattr(namespace, "verbose", 0) or 0
    _configure_logging(verbosity)
    from paco_reward.cpu_threads import configure_cpu_threads

    configure_cpu_threads()  # before the command imports torch: no oversubscribed cores
    try:
        recipe_values = None
        if recipe_command and namespace.recipe is not None:  # a missing file or a mistyped key,
            recipe_values = read_recipe(namespace.recipe)  # before the config is imported
            if specs:
                _check_recipe_keys(recipe_values, specs, mappings)
        name = getattr(namespace, "_command", None)
        command = live()[0] if name is None else next(c for c in live() if c.name == name)
        config = config_from_namespace(command.resolve(), namespace, command.recipe,
                                       recipe_values)  # fmt: skip
        if command.recipe and command.reads_inputs:  # before anything loads
            check_recipe_inputs(namespace.recipe, config)
        from paco_reward.quiet import apply_quiet

        apply_quiet()  # to what resolving the command imported
        return int(command.run(config) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # the CLI boundary: one line naming the input, no traceback
        if verbosity:
            logger.exception("%s failed", prog)
        message = " ".join(str(err).split()) or type(err).__name__  # one line
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 1
