"""Settings sections: frozen, typed classes whose fields are checked and converted from YAML's values.

A section is a class of typed fields with defaults, as config.py writes them:

    class ApiSettings(Section):
        host: str = "127.0.0.1"
        port: int = Field(8765, ge=0, le=65535)

Made from keyword arguments (nested sections from mappings), it checks every value against its
field's type and bounds, converts what YAML gives where the meaning is plain ("5" for an int, a
path's text, "yes" for a switch, YAML's false for a choice of "off": it reads a bare off so),
and refuses unknown names. All problems of one mapping are raised together as one `Invalid`,
each with the path of keys that leads to it, so a message can name `api.port` and suggest the
setting meant.

Why not pydantic, which the API's request bodies use: every command reads the settings first, and
importing pydantic and building these models cost about 70 ms of each command's start (a whole
`sentient search` takes 260 ms with it); this module costs under 1 ms.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, dataclass_transform

_MISSING: Any = object()


@dataclasses.dataclass(frozen=True)
class Problem:
    """One value refused: where (`loc`, the keys leading to it), what kind (`type`: "missing",
    "extra_forbidden", "value_error" for a field's own check, else the type it should have), and
    the message a person reads."""

    loc: tuple[str | int, ...]
    type: str
    msg: str


class Invalid(ValueError):
    """Values a section refused; `problems` says each."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, p.loc))}: {p.msg}" for p in problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class _Spec:
    """What a field is given when not set, and its rules."""

    default: Any = _MISSING
    default_factory: Callable[[], Any] | None = None
    rules: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    init: bool = True  # False: the program's own, never read from a file (nor compared)

    def value(self) -> Any:
        """The default, made anew where it holds anything that could be changed in place."""
        if self.default_factory is not None:
            return self.default_factory()
        return self.default.model_copy(update={}) if isinstance(self.default, Section) else self.default


def Field(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None, gt: float | None = None,
          ge: float | None = None, le: float | None = None, check: Callable[[Any], Any] | None = None,
          init: bool = True) -> Any:
    """A field with bounds (`gt`, `ge`, `le`) or a `check` of its own (raises ValueError saying
    what to write instead). `init=False`: a field of the program's, never read from a file."""
    rules = {name: rule for name, rule in (("gt", gt), ("ge", ge), ("le", le), ("check", check)) if rule is not None}
    return _Spec(default, default_factory, rules, init)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(Field,))
class Section:
    """The base of every settings section (see the module's doc). Its fields are read from the
    class's annotations when it is made (no code generated: 15 sections made as dataclasses
    cost each command 25 ms), their types only when first checked."""

    _specs: ClassVar[dict[str, _Spec]] = {}
    _types: ClassVar[dict[str, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        specs = dict(cls._specs)
        for name, annotation in vars(cls).get("__annotations__", {}).items():
            if "ClassVar" in str(annotation):
                continue
            found = vars(cls).get(name, _MISSING)
            if not isinstance(found, _Spec):
                found = _Spec(default_factory=_copies(found)) if isinstance(found, list | dict) else _Spec(found)
            if found.default is _MISSING and found.default_factory is None:
                raise TypeError(f"{cls.__name__}.{name}: a setting needs a default")
            specs[name] = found
            if name in vars(cls):
                delattr(cls, name)
        cls._specs = specs

    def __init__(self, **values: Any) -> None:
        checked = self._checked(values)
        for name, spec in self._specs.items():
            object.__setattr__(self, name, checked[name] if name in checked else spec.value())

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: make another with model_copy(update=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name, spec in self._specs.items() if spec.init)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, spec in self._specs.items() if spec.init)
        return f"{type(self).__name__}({shown})"

    @classmethod
    def setting_types(cls) -> dict[str, Any]:
        """Each setting's type (fields a file may set: not the program's own)."""
        if "_types" not in vars(cls):
            hints = typing.get_type_hints(cls)
            cls._types = {name: hints[name] for name, spec in cls._specs.items() if spec.init}
        return cls._types

    @classmethod
    def _checked(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        kinds = cls.setting_types()
        problems = [Problem((name,), "extra_forbidden", "Extra inputs are not permitted")
                    for name in values if name not in kinds]
        checked: dict[str, Any] = {}
        for name, value in values.items():
            if name not in kinds:
                continue
            try:
                checked[name] = _converted(value, kinds[name], cls._specs[name].rules, (name,))
            except Invalid as error:
                problems += error.problems
        if problems:
            raise Invalid(problems)
        return checked

    @classmethod
    def model_validate(cls, values: Mapping[str, Any]) -> typing.Self:
        return cls(**values)

    def model_copy(self, *, update: Mapping[str, Any]) -> typing.Self:
        """This section with `update`'s values in place of its own (checked like any); the
        program's own fields (init=False) come along."""
        kept = {name: getattr(self, name) for name, spec in self._specs.items() if spec.init}
        copied = type(self)(**{**kept, **update})
        for name, spec in self._specs.items():
            if not spec.init:
                object.__setattr__(copied, name, getattr(self, name))
        return copied

    def model_dump(self, *, mode: Literal["python", "json"] = "python", exclude_none: bool = False) -> dict[str, Any]:
        """The settings as a mapping (sections as mappings; in "json" mode, paths as text)."""
        found: dict[str, Any] = {}
        for name in self.setting_types():
            value = _dumped(getattr(self, name), mode, exclude_none)
            if value is not None or not exclude_none:
                found[name] = value
        return found


def _copies(value: list[Any] | dict[str, Any]) -> Callable[[], Any]:
    return lambda: type(value)(value)


def _dumped(value: Any, mode: str, exclude_none: bool) -> Any:
    if isinstance(value, Section):
        return value.model_dump(mode=mode, exclude_none=exclude_none)  # type: ignore[arg-type]
    if isinstance(value, Path) and mode == "json":
        return str(value)
    if isinstance(value, list):
        return [_dumped(item, mode, exclude_none) for item in value]
    if isinstance(value, dict):
        return {key: _dumped(item, mode, exclude_none) for key, item in value.items()}
    return value


_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f"}


def _converted(value: Any, kind: Any, rules: Mapping[str, Any], loc: tuple[str | int, ...]) -> Any:
    """`value` as a `kind` within `rules` (bounds, check); Invalid naming `loc` otherwise."""
    found = _as(value, kind, loc)
    for rule, test, words in (("gt", float.__gt__, "greater than"), ("ge", float.__ge__, "greater than or equal to"),
                              ("le", float.__le__, "less than or equal to")):
        bound = rules.get(rule)
        if bound is not None and found is not None and not test(float(found), float(bound)):
            raise Invalid([Problem(loc, f"{rule}", f"Input should be {words} {bound}")])
    check = rules.get("check")
    if check is not None and found is not None:
        try:
            check(found)
        except ValueError as error:
            raise Invalid([Problem(loc, "value_error", str(error))]) from None
    return found


def _as(value: Any, kind: Any, loc: tuple[str | int, ...]) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) == 1:
            return _as(value, inner[0], loc)
        raise TypeError(f"{kind}: a setting of several types")
    if origin is Literal:
        if value in args and not isinstance(value, bool):
            return value
        if isinstance(value, bool) and (word := "on" if value else "off") in args:
            return word  # YAML reads a bare on/off as a boolean: a choice that has the word meant it
        named = [repr(arg) for arg in args]
        choices = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
        raise Invalid([Problem(loc, "literal_error", f"Input should be {choices}")])
    if kind is Any:
        return value
    if origin is list:
        if not isinstance(value, list | tuple):
            raise _wrong(loc, "list", "a valid list")
        return [_as(item, args[0] if args else Any, (*loc, number)) for number, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(loc, "dict", "a valid dictionary")
        key_kind, value_kind = args or (Any, Any)
        return {_as(key, key_kind, loc): _as(item, value_kind, (*loc, str(key))) for key, item in value.items()}
    if isinstance(kind, type) and issubclass(kind, Section):
        if isinstance(value, kind):
            return value
        if not isinstance(value, Mapping):
            raise _wrong(loc, "model", "a valid dictionary or instance of " + kind.__name__)
        try:
            return kind(**value)
        except Invalid as error:
            raise Invalid([Problem((*loc, *p.loc), p.type, p.msg) for p in error.problems]) from None
    return _scalar(value, kind, loc)


def _scalar(value: Any, kind: Any, loc: tuple[str | int, ...]) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise _wrong(loc, "bool", "a valid boolean")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            return int(value.strip())
        raise _wrong(loc, "int", "a valid integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise _wrong(loc, "float", "a valid number")
    if kind is str:
        if isinstance(value, str):
            return value
        raise _wrong(loc, "string", "a valid string")
    if kind is Path:
        if isinstance(value, str | Path):
            return Path(value)
        raise _wrong(loc, "path", "a valid path")
    raise TypeError(f"{kind}: not a type a setting can have")


def _wrong(loc: tuple[str | int, ...], kind: str, what: str) -> Invalid:
    return Invalid([Problem(loc, f"{kind}_type", f"Input should be {what}")])
