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
import logging
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
    first takes a YAML file of the dataclass's fields. ``config_cls`` may be a function
    returning the class, so a heavy import happens only when that command runs.
    """

    name: str
    config_cls: type | Callable[[], type]
    run: Callable[[Any], int | None]
    help: str
    recipe: bool = False

    def resolve(self) -> type:
        cls = self.config_cls
        return cls if isinstance(cls, type) else cls()


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


def _add_field(parser: argparse.ArgumentParser, f: dataclasses.Field, tp, prefix: str,
               required: bool) -> None:  # fmt: skip
    name = prefix + f.name
    help_text = f.metadata.get("help", "")
    inner, optional = _unwrap_optional(tp)
    origin = typing.get_origin(inner)
    if f.metadata.get("positional"):
        kwargs: dict[str, Any] = {"help": help_text}
        if f.metadata.get("nargs"):
            kwargs["nargs"] = f.metadata["nargs"]
        elif _has_default(f):
            kwargs["nargs"] = "?"
        item = (typing.get_args(inner) or (str,))[0] if origin is list else inner
        kwargs["type"] = str if item in (str, Path) else _yaml_value
        parser.add_argument(f.name, **kwargs)
        return
    flags = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
    kwargs = {"dest": name, "help": help_text, "default": argparse.SUPPRESS}
    if required and not _has_default(f):  # a missing value is a usage error (exit 2)
        kwargs["required"] = True
    if inner is bool:
        kwargs.update(nargs="?", const=True, type=_to_bool, metavar="true|false")
        parser.add_argument(*flags, **kwargs)
        if not prefix:
            negations = [f"--no_{name}", f"--no-{name.replace('_', '-')}"]
            parser.add_argument(*negations, dest=name, action="store_const", const=False,
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS)  # fmt: skip
        return
    if origin is list:  # repeating the flag adds to the list (--scorer a --scorer b)
        (item,) = typing.get_args(inner) or (str,)
        kwargs.update(action="extend", nargs="*", type=str if item is str else _yaml_value)
    elif inner in (str, Path):
        kwargs["type"] = _string_or_none if optional else str
    elif inner in (int, float):
        kwargs["type"] = _number(inner, optional)
    elif str in _union_members(inner):
        kwargs["type"] = _text_in_union(_union_members(inner), optional)
    else:
        kwargs["type"] = _yaml_value
    if typing.get_origin(inner) is typing.Literal:
        kwargs["choices"] = list(typing.get_args(inner))
    parser.add_argument(*flags, **kwargs)


def add_dataclass_arguments(parser: argparse.ArgumentParser, cls: type, prefix: str = "",
                            required: bool = True) -> None:  # fmt: skip
    """Add one option per field of ``cls`` (nested dataclass fields as dotted options).

    With ``required``, a field without a default is a required option (``False`` when a
    recipe may give it)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints.get(f.name, str)
        inner, _ = _unwrap_optional(tp)
        if dataclasses.is_dataclass(inner):
            add_dataclass_arguments(parser, inner, f"{prefix}{f.name}.", required)
        else:
            _add_field(parser, f, tp, prefix, required)


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
    mappings = sorted(mapping_fields(cls), key=len, reverse=True)  # the longest name first
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


def _parse(parser: argparse.ArgumentParser, cls: type | None,
           argv: Sequence[str]) -> argparse.Namespace:  # fmt: skip
    """``parser.parse_args`` of ``argv`` with the mapping-entry flags of ``cls`` (none without
    a class: argparse then says what is wrong) set on the namespace as dotted names, after
    the other flags: an entry wins over its whole mapping."""
    try:
        rest, entries = split_entry_flags(cls, argv) if cls is not None else (argv, {})
    except ConfigError as err:
        parser.error(str(err))
    namespace = parser.parse_args(rest)
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


def build_config(cls: type, values: dict[str, Any], where: str = "arguments"):
    """``cls`` from a mapping, refusing unknown keys; ``cls.from_dict`` when it has one."""
    from_dict = getattr(cls, "from_dict", None)
    if callable(from_dict):
        return from_dict(values)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} for {cls.__name__}; valid keys: {sorted(names)}."
        )
    return cls(**coerce_floats(cls, values))


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


def config_from_namespace(cls: type, namespace: argparse.Namespace, recipe: bool = False):
    """The config a parsed command line describes (recipe values under the flags)."""
    given = {k: v for k, v in vars(namespace).items() if not k.startswith("_")}
    given.pop("verbose", None)
    values = read_recipe(given.pop("recipe")) if recipe else {}
    positional = {f.name for f in dataclasses.fields(cls) if f.metadata.get("positional")}
    values = apply_overrides(values, {k: v for k, v in given.items() if k not in positional})
    values.update({k: given[k] for k in positional if k in given and given[k] is not None})
    return build_config(cls, words_for_strings(cls, values), "recipe" if recipe else "command line")


def parse_config(cls: type, argv: Sequence[str] | None = None, *, recipe: bool = False,
                 prog: str | None = None):  # fmt: skip
    """Parse ``argv`` into a ``cls`` (argparse exits with 2 on a usage error)."""
    parser = argparse.ArgumentParser(prog=prog, description=(cls.__doc__ or "").split("\n\n")[0])
    if recipe:
        parser.add_argument("recipe", help="YAML file of config fields; flags override it")
    add_dataclass_arguments(parser, cls, required=not recipe)
    return config_from_namespace(cls, _parse(parser, cls, argv), recipe)


def _configure_logging(verbosity: int) -> None:
    level = logging.DEBUG if verbosity > 1 else logging.INFO if verbosity else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)


def run_cli(prog: str, description: str, commands: Sequence[Command],
            argv: Sequence[str] | None = None) -> int:  # fmt: skip
    """Parse ``argv`` into one of ``commands``, run it and return the exit code.

    A single command is the whole program (no subcommand name); several are subcommands.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log INFO (-vv: DEBUG); show tracebacks of errors")  # fmt: skip
    if len(commands) == 1:
        (command,) = commands
        targets = {None: command}
        chosen_cls = command.resolve()
        if command.recipe:
            parser.add_argument("recipe", help="YAML file of config fields; flags override it")
        add_dataclass_arguments(parser, chosen_cls, required=not command.recipe)
    else:
        sub = parser.add_subparsers(dest="_command", required=True, metavar="COMMAND")
        targets = {command.name: command for command in commands}
        chosen = next((a for a in argv if not a.startswith("-")), None)
        chosen_cls = targets[chosen].resolve() if chosen in targets else None
        for command in commands:
            p = sub.add_parser(command.name, help=command.help, description=command.help)
            p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                           help="log INFO (-vv: DEBUG)")  # fmt: skip
            if command.name != chosen:  # only the chosen command's arguments are built
                continue
            if command.recipe:
                p.add_argument("recipe", help="YAML file of config fields; flags override it")
            add_dataclass_arguments(p, chosen_cls, required=not command.recipe)
    namespace = _parse(parser, chosen_cls, argv)
    verbosity = getattr(namespace, "verbose", 0) or 0
    command = targets[getattr(namespace, "_command", None)]
    _configure_logging(verbosity)
    try:
        config = config_from_namespace(command.resolve(), namespace, command.recipe)
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
