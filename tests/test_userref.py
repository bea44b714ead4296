"""User code named at the terminal (MODULE:ATTR): imported from the current folder or a file,
every mistake one line."""

from __future__ import annotations

import pytest

from explorer.testing import load_user_reference as load


def _write(folder, name, text):
    (folder / f"{name}.py").write_text(text)
    return folder / f"{name}.py"


def test_module_from_current_folder_and_dotted_attr(tmp_path, monkeypatch):
    _write(tmp_path, "urmod_a", "class Sim:\n    @staticmethod\n    def step(x):\n        return x + 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load("urmod_a:Sim.step")(1) == 2


def test_module_from_a_file_path(tmp_path):
    path = _write(tmp_path, "urmod_b", "VALUE = 41\n")
    assert load(f"{path}:VALUE") == 41


@pytest.mark.parametrize("ref, words", [
    ("no_colon", "MODULE:ATTR"),
    ("a:b:c", "MODULE:ATTR"),
    (":attr", "MODULE:ATTR"),
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
    ("/no/such/file.py:f", "no such file"),
])
def test_bad_references_are_one_line(ref, words):
    with pytest.raises(ValueError, match="") as caught:
        load(ref, "function")
    text = str(caught.value)
    assert words in text and "\n" not in text


def test_missing_attribute_and_raising_module_name_what_failed(tmp_path):
    good = _write(tmp_path, "urmod_c", "x = 1\n")
    with pytest.raises(ValueError, match="has no attribute 'y'"):
        load(f"{good}:y")
    bad = _write(tmp_path, "urmod_d", "raise RuntimeError('needs a data file')\n")
    with pytest.raises(ValueError, match="RuntimeError: needs a data file"):
        load(f"{bad}:x")
