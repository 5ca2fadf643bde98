"""The broker's file storage (``broker.outbound.files``): files by plain ids in one folder, a
size cap, no way out of the folder, and a purge that is safe to run twice."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from broker.errors import BadRequest, ConfigError, NotFound, PayloadTooLarge
from broker.outbound.files import FolderFiles, make_file_store
from broker.settings import Settings


@pytest.fixture
def store(tmp_path: Path) -> FolderFiles:
    return FolderFiles(tmp_path / "files", max_bytes=1024)


def test_a_stored_file_reads_back_with_what_it_is(store: FolderFiles) -> None:
    stored = store.put("download-1", b"data", filename="a.pdf", content_type="application/pdf")
    found, data = store.read("download-1")
    assert (found, data) == (stored, b"data")
    assert found.to_json() == {
        "fileId": "download-1",
        "filename": "a.pdf",
        "contentType": "application/pdf",
        "size": 4,
        "eTag": None,
    }


def test_the_same_id_again_replaces_the_file(store: FolderFiles) -> None:
    store.put("f", b"one", filename="a", content_type="text/plain")
    store.put("f", b"two", filename="a", content_type="text/plain")
    assert store.read("f")[1] == b"two"
    assert sorted(p.name for p in store.folder.iterdir()) == ["f.bin", "f.json"]


@pytest.mark.parametrize("file_id", ["../escape", "a/b", "/etc/passwd", "..", "", "a\x00b", "é"])
def test_an_id_that_is_not_a_plain_name_is_refused(store: FolderFiles, file_id: str) -> None:
    with pytest.raises(BadRequest):
        store.put(file_id, b"x", filename="x", content_type="text/plain")
    with pytest.raises(BadRequest):
        store.read(file_id)
    assert not (store.folder.parent / "escape.bin").exists()


def test_a_file_over_the_cap_is_refused_and_nothing_is_written(store: FolderFiles) -> None:
    with pytest.raises(PayloadTooLarge, match="BROKER_FILE_MAX_BYTES"):
        store.put("big", b"x" * 1025, filename="big", content_type="text/plain")
    assert not store.folder.exists() or not any(store.folder.iterdir())


def test_a_missing_file_is_not_found(store: FolderFiles) -> None:
    with pytest.raises(NotFound):
        store.read("never")


def test_the_purge_removes_old_files_only_and_is_safe_to_run_twice(store: FolderFiles) -> None:
    # Given an old file, a new one, and old bytes whose description never landed
    store.put("old", b"o", filename="o", content_type="text/plain")
    store.put("new", b"n", filename="n", content_type="text/plain")
    (store.folder / "stray.bin").write_bytes(b"s")
    long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=40)).timestamp()
    for name in ("old.bin", "old.json", "stray.bin"):
        os.utime(store.folder / name, (long_ago, long_ago))
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    # When the purge runs twice
    first, second = store.purge(cutoff), store.purge(cutoff)
    # Then the old file and the stray bytes went once, the new file stays
    assert (first, second) == (1, 0)
    assert sorted(p.name for p in store.folder.iterdir()) == ["new.bin", "new.json"]


def test_the_storage_url_names_a_folder_and_other_schemes_are_refused(tmp_path: Path) -> None:
    settings = Settings.from_env({"BROKER_FILE_STORAGE_URL": f"file://{tmp_path}/f"})
    assert make_file_store(settings).folder == Path(f"{tmp_path}/f")
    with pytest.raises(ConfigError, match="BROKER_FILE_STORAGE_URL"):
        make_file_store(settings.replace(file_storage_url="s3://bucket"))
