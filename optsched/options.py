"""Typed options of the formulations: one frozen dataclass per problem's ``solve`` and ``bounds``.

A formulation reads its options with :meth:`Options.parse`, from a mapping (the command line's
``--solver``, ``--time-limit``, ``--option KEY=VALUE`` ..., or the keywords of
:func:`optsched.solve`) or from an instance of its class. An option the formulation does not have,
a value of the wrong type or out of range, and an option that does nothing in the chosen
configuration (:meth:`Options.check`) raise :class:`OptionError` naming the option: an option that
does nothing is an error, never silence. A time limit is never such an option: a call that needs
no time honours it. ``None`` for a known option means its default.

The field types below carry their validation (pydantic, strict: ``"3"`` is not a number, ``2.0``
not an integer, ``1`` not a boolean) and the phrase of the error message.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import ConfigDict, Field, Strict, TypeAdapter, ValidationError

from .option_error import OptionError

__all__ = [
    "Flag",
    "FiniteFloat",
    "Name",
    "OptionError",
    "Options",
    "PositiveFloat",
    "PositiveInt",
    "Share",
]


@dataclasses.dataclass(frozen=True)
class Expects:
    """Annotation metadata: the phrase an error message uses for a field's type ("must be ...")."""

    phrase: str


Flag = Annotated[bool, Strict(), Expects("true or false")]
Name = Annotated[str, Strict(), Expects("a string")]
PositiveInt = Annotated[int, Strict(), Field(ge=1), Expects("an integer >= 1")]
AnyInt = Annotated[int, Strict(), Expects("an integer")]
PositiveFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False), Expects("a finite number > 0")]
FiniteFloat = Annotated[float, Strict(), Field(allow_inf_nan=False), Expects("a finite number")]
Share = Annotated[float, Strict(), Field(ge=0, le=1), Expects("a number in [0, 1]")]

O = TypeVar("O", bound="Options")


class Options:
    """Base of the options dataclasses (each a frozen dataclass deriving from it).

    ``problem`` names the formulation in error messages; ``what`` says whose options they are
    (``"solve"`` or ``"bound"``).
    """

    problem: ClassVar[str] = ""
    what: ClassVar[str] = "solve"
    __pydantic_config__ = ConfigDict(extra="forbid")

    @classmethod
    def parse(cls: type[O], options: Mapping[str, Any] | O | None = None) -> O:
        """The validated options from a mapping or an instance of this class (its fields checked as a
        mapping's: a dataclass's constructor checks nothing)."""
        if isinstance(options, cls):
            options = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if f.init}  # type: ignore[arg-type]
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"options of {cls.problem!r}: a mapping or {cls.__name__}, got {type(options).__name__}")
        given = dict(options or {})
        names = cls.names()
        for key in given:
            if key not in names:
                raise OptionError(
                    f"problem {cls.problem!r} has no {cls.what} option {key!r} (known: {', '.join(names)})"
                )
        values = {k: v for k, v in given.items() if v is not None}
        try:
            parsed = _adapter(cls).validate_python(values)
        except ValidationError as exc:
            raise OptionError(_message(cls, exc)) from None
        parsed.check()
        return parsed

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def check(self) -> None:
        """Raise :class:`OptionError` for a combination of values that the formulation cannot honour
        or in which an option does nothing (each subclass states its own rules)."""

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults (for a caller that passes them on)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if getattr(self, f.name) != f.default
        }

    def only_with(self, option: str, condition: bool, when: str) -> None:
        """:class:`OptionError` when ``option`` was given although it has effect only ``when``."""
        field = next(f for f in dataclasses.fields(self) if f.name == option)  # type: ignore[arg-type]
        if not condition and getattr(self, option) != field.default:
            raise OptionError(f"option {option!r}: has no effect unless {when}")


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def _message(cls: type[Options], exc: ValidationError) -> str:
    """One line naming the first option at fault, what it must be and what it got."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else "?"
    got = error.get("input")
    hint = typing.get_type_hints(cls, include_extras=True).get(name)
    choices = _literal_choices(hint)
    if choices:
        return f"option {name!r}: unknown {got!r} (known: {', '.join(map(str, choices))})"
    phrase = _phrase(hint)
    if phrase is None:
        return f"option {name!r}: {error['msg'][0].lower()}{error['msg'][1:]}, got {got!r}"
    return f"option {name!r}: must be {phrase}, got {got!r}"


def _arguments(hint: Any) -> tuple[Any, ...]:
    """``hint`` and, for ``X | None``, ``X``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return (hint,)


def _literal_choices(hint: Any) -> tuple[Any, ...]:
    for arg in _arguments(hint):
        if typing.get_origin(arg) is Literal:
            return typing.get_args(arg)
    return ()


def _phrase(hint: Any) -> str | None:
    for arg in _arguments(hint):
        if typing.get_origin(arg) is Annotated:
            for meta in arg.__metadata__:
                if isinstance(meta, Expects):
                    return meta.phrase
    return None
