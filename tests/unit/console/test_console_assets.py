"""Studio's and mermaid's files from npm: pinned integrity, unpacking, idempotence, no npm."""

from __future__ import annotations

import base64
import hashlib
import io
import stat
import tarfile
from pathlib import Path

import pytest

from broker.cli.console import assets_command
from broker.console import assets
from broker.settings import Settings


def tarball(folder: Path, files: dict[str, bytes]) -> tuple[Path, str]:
    path = folder / "pkg.tgz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    digest = hashlib.sha512(path.read_bytes()).digest()
    return path, "sha512-" + base64.b64encode(digest).decode()


@pytest.fixture
def assets_settings(settings: Settings, tmp_path: Path) -> Settings:
    return settings.replace(console_assets_dir=str(tmp_path / "assets"))


def test_a_tarball_with_the_pinned_integrity_is_unpacked(
    assets_settings: Settings, tmp_path: Path
) -> None:
    path, integrity = tarball(tmp_path, {"package/index.html": b"<html>"})
    package = assets.Package("studio", "x", "1.0.0", integrity)
    target = assets.folder(assets_settings, package)
    assets.unpack(path, package, target)
    assert (target / "index.html").read_bytes() == b"<html>"
    assert assets.installed(assets_settings, package)


def test_a_tarball_with_another_integrity_installs_nothing(
    assets_settings: Settings, tmp_path: Path
) -> None:
    path, _ = tarball(tmp_path, {"package/index.html": b"<html>"})
    package = assets.Package("studio", "x", "1.0.0", "sha512-AAAA")
    with pytest.raises(assets.IntegrityError, match="not the pinned"):
        assets.unpack(path, package, assets.folder(assets_settings, package))
    assert not assets.folder(assets_settings, package).exists()


def test_a_tarball_escaping_its_folder_is_refused(
    assets_settings: Settings, tmp_path: Path
) -> None:
    path, integrity = tarball(tmp_path, {"package/../../evil": b"x"})
    package = assets.Package("studio", "x", "1.0.0", integrity)
    with pytest.raises(tarfile.TarError):
        assets.unpack(path, package, assets.folder(assets_settings, package))
    assert not (tmp_path / "evil").exists()


def test_install_uses_npm_pack_once_and_then_does_nothing(
    assets_settings: Settings, tmp_path: Path
) -> None:
    # Given a stand-in npm that packs a fixed tarball and counts its calls
    path, integrity = tarball(tmp_path, {"package/a.js": b"1"})
    calls = tmp_path / "calls"
    npm = tmp_path / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {calls}\n'
        'while [ "$1" != "--pack-destination" ]; do shift; done\n'
        f'cp {path} "$2/x-1.0.0.tgz"\n'
    )
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    package = assets.Package("studio", "x", "1.0.0", integrity)
    # When installing twice
    assert assets.install(assets_settings, package, npm=str(npm))
    assert assets.install(assets_settings, package, npm=str(npm))
    # Then npm packed the exact version once
    assert calls.read_text().split("\n")[0].startswith("pack x@1.0.0")
    assert len(calls.read_text().strip().split("\n")) == 1


def test_without_npm_install_reports_false(
    assets_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(assets.shutil, "which", lambda _name: None)
    assert assets.install(assets_settings, assets.STUDIO) is False
    assert not assets.installed(assets_settings, assets.STUDIO)


def test_the_pins_are_exact_versions_with_sha512() -> None:
    for package in assets.PACKAGES:
        assert package.version.count(".") == 2
        assert package.version[0].isdigit()
        assert package.integrity.startswith("sha512-")
        assert len(base64.b64decode(package.integrity.removeprefix("sha512-"))) == 64
    assert assets.STUDIO.spec == "@elsa-workflows/elsa-studio-wasm@3.8.2"


def test_the_assets_command_without_npm_says_so_in_one_line_and_succeeds(
    assets_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from broker.settings import set_settings

    monkeypatch.setattr(assets.shutil, "which", lambda _name: None)
    set_settings(assets_settings)
    try:
        result = CliRunner().invoke(assets_command, [])
        check = CliRunner().invoke(assets_command, ["--check"])
    finally:
        set_settings(None)
    assert result.exit_code == 0
    assert result.output.count("\n") == 1
    assert "npm not found" in result.output
    assert "make install" in result.output
    assert "missing" in check.output


def test_files_without_a_twin_get_a_gzip_one_on_unpacking(
    assets_settings: Settings, tmp_path: Path
) -> None:
    import gzip

    script = b"console.log('mermaid');" * 100
    path, integrity = tarball(tmp_path, {"package/dist/m.min.js": script})
    package = assets.Package("mermaid", "m", "1.0.0", integrity, precompress=("dist/m.min.js",))
    target = assets.folder(assets_settings, package)
    assets.unpack(path, package, target)
    assert gzip.decompress((target / "dist" / "m.min.js.gz").read_bytes()) == script
