"""zoo.files.atomic_path: a reader sees the old file or the new one, never a half-written one,
and nothing is left behind when the write stops anywhere."""

import os
import stat

import pytest

from zoo.files import atomic_path, write_text


def test_a_write_replaces_the_file_whole_with_a_plain_open_mode(tmp_path):
    target = tmp_path / "out.json"
    write_text(target, "old")
    write_text(target, "new", overwrite=True)
    assert target.read_text() == "new" and os.listdir(tmp_path) == ["out.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600


def test_an_existing_file_is_not_overwritten_unless_asked(tmp_path):
    target = tmp_path / "out.json"
    write_text(target, "old")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        write_text(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]


@pytest.mark.parametrize("where", ["setting the mode", "writing"])
def test_an_interrupt_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch, where):
    target = tmp_path / "out.json"
    write_text(target, "old")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "setting the mode":  # between the temporary file's creation and the write
        monkeypatch.setattr(os, "chmod", interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_path(target, overwrite=True) as tmp:
        tmp.write_text("half")
        interrupted()
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]
