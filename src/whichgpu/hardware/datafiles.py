"""The hardware's TOML files: reading them, checking their fields, layering user files over ours.

GPU specs (hardware/catalog.py), systems (hardware/system_files.py) and engines
(hardware/engine.py) are files of one shape: top-level fields, ``[section]`` tables of fields,
other tables (``[sources]``). Each kind declares its fields as tables of `Field` and checks a
value in its own words (a `Check`). Shared here:

* `FileSchema` (GPU and system files): a file walked against its tables in file order, so the
  first problem in it is the one reported, with one wording for unknown and missing fields
  (engine profiles, whose sections are all required, share the unknown-field error);
* the checks every kind shares (`check_shared`): a number is finite and within its field's
  plausible range (`Field.lo`..`Field.hi`: a GPU with 1e-300 GB/s or infinite TFLOP/s is a typo,
  not a GPU), and a name users type (an id, name or alias) has no control or invisible
  character and does not start with '-' (`names.name_problem`);
* loading: the packaged files read and checked once per process (`packaged_entries`), then the
  user's directories in order (`user_files`), where a file adds an entry or, naming a known
  one, changes it field by field (`Entry.overridden`).

Every problem is a ``CatalogError(file, field, what would be valid)``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from whichgpu.errors import CatalogError
from whichgpu.hardware.names import name_problem

Raw = dict[str, Any]
"""A file's contents as TOML parses them."""


def read_toml(path: Path) -> Raw:
    try:
        with open(path, "rb") as fh:
            data: Raw = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as e:
        raise CatalogError(str(path), "", f"not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise CatalogError(str(path), "", f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
                           "a TOML file must be UTF-8: save it as UTF-8") from None
    except ValueError as e:  # tomllib's own int() past 4300 digits
        raise CatalogError(str(path), "", f"not valid TOML: {e}") from None
    except OSError as e:
        raise CatalogError(str(path), "", f"cannot read: {e.strerror}") from None


# --------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class Field:
    """One field a file may hold."""

    types: tuple[type, ...]
    """The TOML types its value may have (a kind's `Check` never takes true/false for a number)."""
    check: str
    """What the value must be beyond its type, as the kind's `Check` reads it: "pos" (> 0),
    "nonneg" (>= 0), "str", "bool", "list" (of strings), "choice" (one of `choices`), or a
    kind's own ("peak", "date" in GPU files)."""
    required: bool = False
    """A complete file gives it; an override (a partial file) may leave it out."""
    choices: tuple[str, ...] = ()
    """The valid values of a "choice" field, written as strings."""
    lo: float | None = None
    """A number's plausible least value (inclusive); None: only its `check` (> 0, >= 0) bounds it."""
    hi: float | None = None
    """A number's plausible greatest value (inclusive); None: unbounded (but always finite)."""
    unit: str = ""
    """The unit of a number, as the range error says it ("GB/s")."""
    name: bool = False
    """A name users type to pick the entry (an id, name, alias, or a list of them): no control or
    invisible characters, not starting with '-' (`names.name_problem`)."""


def text(required: bool = False, name: bool = False) -> Field:
    """A string; `name`: one users type to pick the entry (checked by `check_shared`)."""
    return Field((str,), "str", required, name=name)


def number(check: str = "pos", required: bool = False, lo: float | None = None, hi: float | None = None,
           unit: str = "") -> Field:
    """An integer or float; `check` "pos" (> 0) or "nonneg" (>= 0); finite, and within `lo`..`hi`
    (its plausible range, in `unit`) when given."""
    return Field((int, float), check, required, lo=lo, hi=hi, unit=unit)


def whole(check: str = "pos", required: bool = False, lo: float | None = None, hi: float | None = None,
          unit: str = "") -> Field:
    """An integer; `check` "pos" (> 0) or "nonneg" (>= 0); within `lo`..`hi` when given."""
    return Field((int,), check, required, lo=lo, hi=hi, unit=unit)


def flag(required: bool = False) -> Field:
    return Field((bool,), "bool", required)


def strings(required: bool = False, name: bool = False) -> Field:
    """A list of strings; `name`: names users type (aliases), each checked by `check_shared`."""
    return Field((list,), "list", required, name=name)


def one_of(values: Iterable[str | int], required: bool = False) -> Field:
    """One of `values` (all strings, or all integers)."""
    vals = tuple(values)
    types: tuple[type, ...] = (int,) if all(isinstance(v, int) for v in vals) else (str,)
    return Field(types, "choice", required, tuple(str(v) for v in vals))


Check = Callable[[str, str, Any, Field], None]
"""Checks one value against its field: (file, field name, value, Field); raises CatalogError."""


def _dotted(table: str, key: str) -> str:
    return f"{table}.{key}" if table else key


def unknown_field(path: str, name: str, valid: Iterable[str]) -> CatalogError:
    return CatalogError(path, name, "unknown field; valid: " + ", ".join(valid))


def valid_range(f: Field) -> str:
    """What a number field holds, as errors say it: "a number from 10 to 100000 GB/s" (the
    plausible range)."""
    kind = "a whole number" if f.types == (int,) else "a number"
    unit = f" {f.unit}" if f.unit else ""
    if f.lo is not None and f.hi is not None:
        return f"{kind} from {f.lo:g} to {f.hi:g}{unit}"
    if f.hi is not None:
        return f"{kind} {'> 0' if f.check == 'pos' else '>= 0'} and at most {f.hi:g}{unit}"
    if f.lo is not None:
        return f"{kind} >= {f.lo:g}{unit}"
    return f"a finite {kind[2:]}" + (" > 0" if f.check == "pos" else " >= 0" if f.check == "nonneg" else "")


def check_shared(path: str, key: str, value: Any, f: Field) -> None:
    """The checks every kind of file shares, after the kind's own (which checked the type): a
    number (never true/false) is finite and within the field's plausible range; a name users
    type has no control or invisible character and does not start with '-'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and f.check != "choice":
        try:
            x = float(value)
        except OverflowError:  # an integer past the largest float
            x = math.copysign(math.inf, value)
        if not (math.isfinite(x) and (f.lo is None or x >= f.lo) and (f.hi is None or x <= f.hi)):
            shown = repr(value) if isinstance(value, float) or abs(value) < 10**18 else f"{x:g}"
            raise CatalogError(path, key, f"expected {valid_range(f)}, got {shown}")
    if f.name:
        for v in (value if isinstance(value, list) else [value]):
            problem = name_problem(v) if isinstance(v, str) else None
            if problem:
                raise CatalogError(path, key, f"{v!r} {problem}")


def check_table(path: str, name: str, table: Raw, fields: Mapping[str, Field], check: Check) -> None:
    """Each key of the table `name` in file order: an unknown one is an error listing the valid
    ones; a known one's value passes `check`, then `check_shared`."""
    for key, value in table.items():
        if key not in fields:
            raise unknown_field(path, _dotted(name, key), fields)
        check(path, _dotted(name, key), value, fields[key])
        check_shared(path, _dotted(name, key), value, fields[key])


def check_required(path: str, name: str, table: Raw, fields: Mapping[str, Field]) -> None:
    """The first required field (in `fields` order) the table `name` ("" for the top level) lacks."""
    for key, f in fields.items():
        if f.required and key not in table:
            raise CatalogError(path, _dotted(name, key), "required field is missing")


@dataclass(frozen=True)
class FileSchema:
    """What one kind of file holds: top-level fields, sections of fields, other tables."""

    fields: Mapping[str, Field]
    """Top-level fields."""
    sections: Mapping[str, Mapping[str, Field]]
    """``[section]`` -> its fields."""
    check: Check
    """How this kind checks a value (its messages are its own)."""
    tables: Mapping[str, Callable[[str, Any], None]] = field(default_factory=dict)
    """Other top-level keys (``sources``, ``measured``) and the function that checks each."""
    required_sections: tuple[str, ...] = ()
    """Sections a complete file gives."""
    optional_sections: tuple[str, ...] = ()
    """Sections that may be the string "none": no such link (an override removes it so)."""

    def check_fields(self, path: str, raw: Raw) -> None:
        """Every key of the file in file order: known, of the right type, a valid value."""
        for key, value in raw.items():
            if key in self.fields:
                self.check(path, key, value, self.fields[key])
                check_shared(path, key, value, self.fields[key])
            elif key in self.sections:
                optional = key in self.optional_sections
                if optional and value == "none":
                    continue
                if not isinstance(value, dict):
                    raise CatalogError(path, key, f"expected a table [{key}]" + (' or "none" (no such link)' if optional else ""))
                check_table(path, key, value, self.sections[key], self.check)
            elif key in self.tables:
                self.tables[key](path, value)
            else:
                raise unknown_field(path, key, sorted([*self.fields, *self.sections, *self.tables]))

    def check_complete(self, path: str, raw: Raw) -> None:
        """The required fields and sections of a complete file (not an override) are there."""
        check_required(path, "", raw, self.fields)
        for sec in self.required_sections:
            if sec not in raw:
                raise CatalogError(path, sec, f"required table [{sec}] is missing")
        for sec, fields in self.sections.items():
            if isinstance(raw.get(sec), dict):
                check_required(path, sec, raw[sec], fields)


# --------------------------------------------------------------------------- packaged + user files


class Validate(Protocol):
    """Checks a file's structure; a `partial` one (an override) may leave out required fields."""

    def __call__(self, path: str, raw: Raw, partial: bool = False) -> None: ...


@dataclass(frozen=True)
class Entry:
    """One entry as loaded: the file that defined it, its fields with the user's overrides
    merged in, and the override files in the order they applied."""

    path: str
    raw: Raw
    overridden_by: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """The file a problem with its merged fields is reported against: the last override."""
        return self.overridden_by[-1] if self.overridden_by else self.path

    def overridden(self, path: str, over: Raw, merge: Callable[[Raw, Raw], Raw], validate: Validate) -> Entry:
        """The entry as the override file `path` changes it: `over` checked as a partial file,
        merged in by `merge`, and the result checked as a complete one."""
        validate(path, over, partial=True)
        merged = merge(self.raw, over)
        validate(path, merged)
        return Entry(self.path, merged, (*self.overridden_by, path))


_PACKAGED: dict[Path, list[tuple[str, Raw]]] = {}


def packaged_files(directory: Path, validate: Validate) -> list[tuple[str, Raw]]:
    """(path, contents) of every file of a packaged directory, read and checked once."""
    if directory not in _PACKAGED:
        out = []
        for p in sorted(directory.glob("*.toml")):
            raw = read_toml(p)
            validate(str(p), raw)
            out.append((str(p), raw))
        _PACKAGED[directory] = out
    return _PACKAGED[directory]


def packaged_entries(directory: Path, validate: Validate) -> dict[str, Entry]:
    """The packaged files by id (a new dict each call: the caller adds the user's to it)."""
    entries: dict[str, Entry] = {}
    for path, raw in packaged_files(directory, validate):
        if raw["id"] in entries:
            raise CatalogError(path, "id", f"duplicate id {raw['id']!r} (also in {entries[raw['id']].path})")
        entries[raw["id"]] = Entry(path, raw)
    return entries


def user_files(dirs: Iterable[str], missing: str) -> Iterator[tuple[str, Raw]]:
    """(path, contents) of each ``*.toml`` file of the user's directories, a directory at a
    time, in name order; a directory that does not exist is an error saying `missing`."""
    for d in dirs:
        dp = Path(d)
        if not dp.is_dir():
            raise CatalogError(d, "", missing)
        for p in sorted(dp.glob("*.toml")):
            yield str(p), read_toml(p)
