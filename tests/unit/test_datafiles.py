"""The shared reading and checking of hardware files (hardware/datafiles.py); the GPU, system and
engine loaders built on it are tested in test_catalog.py, test_systems.py, test_engines_physics.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from whichgpu.errors import CatalogError
from whichgpu.hardware.datafiles import (
    Entry,
    Field,
    FileSchema,
    Raw,
    number,
    one_of,
    text,
    user_files,
)


def reject_negative(path: str, name: str, value: Any, f: Field) -> None:
    if not isinstance(value, f.types) or (f.check == "pos" and value <= 0):
        raise CatalogError(path, name, f"bad {value!r}")


SCHEMA = FileSchema(
    {"id": text(required=True), "notes": text()},
    {"link": {"gbps": number(required=True), "gen": one_of((3, 4), required=True)}, "pcie": {"gen": number()}},
    reject_negative, tables={"sources": lambda path, value: None},
    required_sections=("pcie",), optional_sections=("link",))


def test_one_of_keeps_the_values_type_and_writes_them_as_strings() -> None:
    assert one_of((3, 4)) == Field((int,), "choice", False, ("3", "4"))
    assert one_of(("a", "b"), required=True).types == (str,)


def test_the_first_problem_in_file_order_is_reported() -> None:
    with pytest.raises(CatalogError, match=r"'link.gbps': bad -1"):
        SCHEMA.check_fields("f", {"id": "x", "link": {"gbps": -1, "bogus": 1}})
    with pytest.raises(CatalogError, match=r"'link.bogus': unknown field; valid: gbps, gen"):
        SCHEMA.check_fields("f", {"link": {"bogus": 1, "gbps": -1}})
    with pytest.raises(CatalogError, match=r"'extra': unknown field; valid: id, link, notes, pcie, sources"):
        SCHEMA.check_fields("f", {"extra": 1})


def test_an_optional_section_may_be_none_and_others_must_be_tables() -> None:
    SCHEMA.check_fields("f", {"link": "none"})
    with pytest.raises(CatalogError, match=r"expected a table \[link\] or \"none\" \(no such link\)"):
        SCHEMA.check_fields("f", {"link": 3})
    with pytest.raises(CatalogError, match=r"'pcie': expected a table \[pcie\]$"):
        SCHEMA.check_fields("f", {"pcie": "none"})


def test_a_complete_file_has_its_required_fields_and_sections() -> None:
    with pytest.raises(CatalogError, match=r"'id': required field is missing"):
        SCHEMA.check_complete("f", {"pcie": {}})
    with pytest.raises(CatalogError, match=r"'pcie': required table \[pcie\] is missing"):
        SCHEMA.check_complete("f", {"id": "x"})
    with pytest.raises(CatalogError, match=r"'link.gen': required field is missing"):
        SCHEMA.check_complete("f", {"id": "x", "pcie": {}, "link": {"gbps": 1}})
    SCHEMA.check_complete("f", {"id": "x", "pcie": {}, "link": "none"})


def test_an_override_is_checked_alone_then_merged_and_recorded() -> None:
    seen: list[tuple[str, Raw, bool]] = []

    def validate(path: str, raw: Raw, partial: bool = False) -> None:
        seen.append((path, raw, partial))

    base = Entry("packaged.toml", {"id": "a", "n": 1})
    once = base.overridden("u1.toml", {"n": 2}, lambda b, o: {**b, **o}, validate)
    twice = once.overridden("u2.toml", {"m": 3}, lambda b, o: {**b, **o}, validate)
    assert seen[:2] == [("u1.toml", {"n": 2}, True), ("u1.toml", {"id": "a", "n": 2}, False)]
    assert twice == Entry("packaged.toml", {"id": "a", "n": 2, "m": 3}, ("u1.toml", "u2.toml"))
    assert (base.where, twice.where) == ("packaged.toml", "u2.toml")


def test_user_files_come_a_directory_at_a_time_in_name_order(tmp_path: Path) -> None:
    for d, name in (("one", "b"), ("one", "a"), ("two", "a")):
        (tmp_path / d).mkdir(exist_ok=True)
        (tmp_path / d / f"{name}.toml").write_text(f'id = "{d}-{name}"\n')
    (tmp_path / "one" / "notes.txt").write_text("not a data file")
    found = [raw["id"] for _, raw in user_files([str(tmp_path / "one"), str(tmp_path / "two")], "gone")]
    assert found == ["one-a", "one-b", "two-a"]
    with pytest.raises(CatalogError, match=r"nowhere: gone"):
        list(user_files([str(tmp_path / "one"), "nowhere"], "gone"))
