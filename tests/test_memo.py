"""Values kept on disk between processes (engine.core.memo): computed once per version of their inputs, recomputed
when an input changes or the file is unreadable, and the GPU fit read back equal to a fresh one."""

from __future__ import annotations

import pytest

from engine.core import memo


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.toml").write_text("a = 1\n")
    return data


def _counting():
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}

    return calls, compute


def test_a_second_process_reads_the_value_instead_of_computing_it(home):
    calls, compute = _counting()
    assert memo.on_disk("x", [home], compute) == {"value": 1}
    assert memo.on_disk("x", [home], compute) == {"value": 1}  # read back, as a new process would
    assert len(calls) == 1


def test_an_edited_input_recomputes_and_the_old_file_goes(home, tmp_path):
    _calls, compute = _counting()
    memo.on_disk("x", [home], compute)
    (home / "rows.toml").write_text("a = 2\n")
    assert memo.on_disk("x", [home], compute) == {"value": 2}
    assert len(list((tmp_path / "home" / "memo").glob("x-*.json"))) == 1


def test_an_unreadable_file_is_recomputed(home, tmp_path):
    _calls, compute = _counting()
    memo.on_disk("x", [home], compute)
    (stored,) = (tmp_path / "home" / "memo").glob("x-*.json")
    stored.write_bytes(b"{not json")
    assert memo.on_disk("x", [home], compute) == {"value": 2}


def test_a_folder_that_cannot_be_written_costs_only_the_saving(home, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("INFERENCE_LAB_HOME", str(tmp_path / "file"))  # a file where the folder should go
    _calls, compute = _counting()
    assert memo.on_disk("x", [home], compute) == {"value": 1}
    assert memo.on_disk("x", [home], compute) == {"value": 2}


def test_the_gpu_fit_reads_back_from_its_json_equal():
    """The fit as engine.core.memo stores it (JSON: no code runs on reading it) decodes to the same fit."""
    import json

    from engine.calc import efficiency as E

    fits = E.fits()
    back = E._fits_from_json(json.loads(json.dumps(E._fits_to_json(fits))))
    assert back == fits


@pytest.mark.slow
def test_the_stored_gpu_fit_equals_a_fresh_one():
    from engine.calc import efficiency as E

    assert E.fits() == E._fit()
