"""How a request setting is declared: `setting()`, the form a front end shows it in, how it travels.

    from rumik_app.settings import Slider, setting, wire_name, flag_name, setting_type
    top_k: int = setting(30, check_top_k, "0 = off, at most 200", Slider(0, 200, 1, "Top-k (0 = off)"))
    wire_name(spec), flag_name(spec), setting_type(spec)      # "top_k", "--top-k", int

The machinery of the declarations in `rumik_app.request` (which holds the settings themselves,
their defaults, bounds and messages): a declaration is a dataclass field whose metadata the CLI,
the protocols and the app read to derive their flags, fields and widgets (docs/ARCHITECTURE.md §5).
`derive` makes a checked copy of a checked object, checking only what changed. Light: no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields


@dataclass(frozen=True)
class Slider:
    """A slider from `low` to `high` in `step`s, with a label."""

    low: float
    high: float
    step: float
    label: str


@dataclass(frozen=True)
class Dropdown:
    """A menu of `choices` (values, or (label, value) pairs), "(none)" first when `none`: the
    setting may be left out. A value off the menu still goes to the setting's check."""

    label: str
    choices: tuple = ()
    none: bool = False


@dataclass(frozen=True)
class Checkbox:
    label: str


@dataclass(frozen=True)
class Textbox:
    label: str
    lines: int = 1


@dataclass(frozen=True)
class NumberBox:
    """A whole-number box; `blank` is what it holds at first and what an empty box reads as."""

    label: str
    blank: object = None


def setting(default, check: Callable[[object], object] | None, help: str,
            form: Slider | Dropdown | Checkbox | Textbox | NumberBox | None = None,
            wire: bool | str = True, flag: bool | str = True, by_reference: bool = False) -> Field:
    """A request setting's one declaration, as a dataclass field (MISSING default: required).

    check: value -> canonical value, or PromptError naming the field (its bounds and message);
    None: the prompt checks it against what the front end knows (the text's limits, the
    checkpoint's voices). help: one line for flags and API docs. form: how the app shows it
    (None: not shown). wire: the wire protocols' field (True: by this name; a str: that name;
    False: none). flag: the CLI's (True: --this-name, or --no-this-name for a switch that is on
    by default; a str: that flag; False: none). by_reference: the value is named, not sent:
    ids of stored objects on the wire, files on the command line, which each front end resolves.
    """
    return field(default=default, metadata={"check": check, "help": help, "form": form, "wire": wire, "flag": flag,
                                            "by_reference": by_reference})


def wire_name(spec: Field) -> str | None:
    """The setting's field name on the wire protocols (None: not sent)."""
    wire = spec.metadata.get("wire")
    return spec.name if wire is True else wire or None


def flag_name(spec: Field) -> str | None:
    """The setting's CLI flag (None: no flag): --top-k; a switch on by default is turned off (--no-normalize)."""
    flag = spec.metadata.get("flag")
    if flag is not True:
        return flag or None
    dashed = spec.name.replace("_", "-")
    return f"--no-{dashed}" if spec.default is True else f"--{dashed}"


SETTING_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def setting_type(spec: Field) -> type:
    """int, float, str or bool: the type a setting is read as from a flag, a wire field or a form
    (its annotation, optionally `| None`); TypeError for a setting of another type."""
    name = spec.type if isinstance(spec.type, str) else getattr(spec.type, "__name__", str(spec.type))
    base = name.split("|")[0].strip()
    if base not in SETTING_TYPES:
        raise TypeError(f"setting {spec.name!r} is annotated {name!r}; front ends read int, float, str or bool")
    return SETTING_TYPES[base]



def derive(source, cls: type, **changes):
    """A `cls` (a dataclass) holding `source`'s values of cls's fields, with `changes` applied:
    a checked copy of a checked object, so only the changes are checked (a chunk of a request,
    a decoder row of a request). Fields `source` lacks take cls's defaults."""
    names = {spec.name for spec in fields(cls)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    copy = object.__new__(cls)
    for spec in fields(cls):
        if spec.name in changes:
            value = changes[spec.name]
            check = spec.metadata.get("check")
            value = check(value) if check is not None else value
        else:
            value = getattr(source, spec.name, spec.default)
            if value is MISSING:
                raise TypeError(f"{cls.__name__} needs {spec.name!r}, which {type(source).__name__} does not have")
        object.__setattr__(copy, spec.name, value)
    return copy
