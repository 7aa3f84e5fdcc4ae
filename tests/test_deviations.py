"""The deviations file: a [deviations] table of "ID" = "reason", and every way it can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainspec.conformance.deviations import load_deviations
from trainspec.errors import UsageError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deviations.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_declared_deviations_load_with_ids_in_upper_case(tmp_path: Path) -> None:
    path = write(tmp_path, '[deviations]\n"res-3" = "  rebuilt on resume (#12) "\n'
                 'PAT-1 = "stops late"\n')
    assert load_deviations(path) == {"RES-3": "rebuilt on resume (#12)", "PAT-1": "stops late"}


def test_an_empty_deviations_table_declares_nothing(tmp_path: Path) -> None:
    assert load_deviations(write(tmp_path, "[deviations]\n")) == {}


def test_a_missing_file_is_named_with_an_example(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"(?s)absent\.toml: no such file.*\[deviations\]"):
        load_deviations(tmp_path / "absent.toml")


def test_a_file_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"deviations\.toml: not valid TOML"):
        load_deviations(write(tmp_path, "RES-3: broken\n"))


def test_a_file_without_a_deviations_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"expected a \[deviations\] table.*found no such "
                       r"table \(top-level keys: deviation\)"):
        load_deviations(write(tmp_path, '[deviation]\n"RES-3" = "typo in the table name"\n'))


def test_a_deviations_key_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="found a str"):
        load_deviations(write(tmp_path, 'deviations = "RES-3"\n'))


def test_an_unknown_clause_id_is_refused_with_the_key(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"\[deviations\] 'RES-99': unknown clause.*trainspec "
                       "list"):
        load_deviations(write(tmp_path, '[deviations]\n"RES-99" = "no such clause"\n'))


@pytest.mark.parametrize("value", ['""', '"   "', "3", "true", '["a"]'])
def test_a_reason_must_be_a_non_empty_string(tmp_path: Path, value: str) -> None:
    with pytest.raises(UsageError, match=r"'RES-3': expected a non-empty string giving the "
                       "reason"):
        load_deviations(write(tmp_path, f'[deviations]\n"RES-3" = {value}\n'))


def test_a_clause_named_twice_in_different_case_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="names RES-3 twice"):
        load_deviations(write(tmp_path, '[deviations]\n"RES-3" = "a"\n"res-3" = "b"\n'))
