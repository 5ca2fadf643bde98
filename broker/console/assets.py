"""The console's third-party front-end files: Elsa Studio and mermaid.js, from the npm registry
(docs/design.md, section 1)."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import logging
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from broker.errors import ConfigError
from broker.settings import Settings

logger = logging.getLogger(__name__)

NPM_TIMEOUT_SECONDS = 600
INSTALL_HINT = "Elsa Studio is not installed: run `make install` (it needs npm)."
MARKER = ".integrity"


@dataclasses.dataclass(frozen=True)
class Package:
    """One npm package at an exact version, with the integrity its tarball must have."""

    key: str  # the folder name under the assets folder
    name: str
    version: str
    integrity: str  # "sha512-<base64>", as npm records it
    #: files the package ships without a precompressed twin; a ``.gz`` one is made on unpacking
    precompress: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


STUDIO = Package(
    "studio",
    "@elsa-workflows/elsa-studio-wasm",
    "3.8.2",
    "sha512-aoyapE8UDCEriuYekGv1CWzLqeNZDUL8nJGmxPXNcvXTkGRT8u4QWBqlRwlm02AZcPpG9PU0FZJx3zSAyQVzGg==",
)
MERMAID = Package(
    "mermaid",
    "mermaid",
    "11.12.0",
    "sha512-ZudVx73BwrMJfCFmSSJT84y6u5brEoV8DOItdHomNLz32uBjNrelm7mg95X7g+C6UoQH/W6mBLGDEDv73JdxBg==",
    precompress=("dist/mermaid.min.js",),
)
PACKAGES = (STUDIO, MERMAID)


class IntegrityError(ConfigError):
    """Raised when a downloaded tarball does not have the pinned integrity hash."""

    code = "integrity_mismatch"


def folder(settings: Settings, package: Package) -> Path:
    """Where ``package`` is unpacked (the tarball's ``package/`` folder becomes this one)."""
    return settings.console_assets_path / package.key


def installed(settings: Settings, package: Package) -> bool:
    root = folder(settings, package)
    marker = root / MARKER
    if not (marker.is_file() and marker.read_text().strip() == package.integrity):
        return False
    # An unpacking from before a file was precompressed is done again.
    return all((root / f"{relative}.gz").is_file() for relative in package.precompress)


def integrity_of(tarball: Path) -> str:
    digest = hashlib.sha512()
    with tarball.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return "sha512-" + base64.b64encode(digest.digest()).decode()


def unpack(tarball: Path, package: Package, target: Path) -> None:
    """Check ``tarball`` against the pinned integrity, then unpack it into ``target`` atomically."""
    actual = integrity_of(tarball)
    if actual != package.integrity:
        raise IntegrityError(
            f"{package.spec}: the tarball's integrity {actual} is not the pinned "
            f"{package.integrity}; nothing was installed"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{package.key}-", dir=target.parent))
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            # The "data" filter refuses absolute paths, links out of the folder and devices.
            archive.extractall(staging, filter="data")
        root = staging / "package"
        if not root.is_dir():
            raise IntegrityError(f"{package.spec}: the tarball has no package/ folder")
        for relative in package.precompress:
            source = root / relative
            with source.open("rb") as raw, gzip.open(f"{source}.gz", "wb", compresslevel=9) as out:
                shutil.copyfileobj(raw, out)
        (root / MARKER).write_text(package.integrity + "\n")
        if target.exists():
            shutil.rmtree(target)
        root.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def install(settings: Settings, package: Package, *, npm: str | None = None) -> bool:
    """Fetch and unpack ``package`` unless it is there already; False when npm is missing."""
    if installed(settings, package):
        return True
    npm = npm or shutil.which("npm")
    if npm is None:
        return False
    with tempfile.TemporaryDirectory(prefix="broker-npm-") as work:
        subprocess.run(
            [npm, "pack", package.spec, "--silent", "--pack-destination", work],
            check=True,
            cwd=work,
            stdout=subprocess.DEVNULL,
            timeout=NPM_TIMEOUT_SECONDS,
        )
        tarballs = sorted(Path(work).glob("*.tgz"))
        if len(tarballs) != 1:
            raise IntegrityError(f"npm pack {package.spec} produced {len(tarballs)} tarballs")
        unpack(tarballs[0], package, folder(settings, package))
    logger.info("installed %s into %s", package.spec, folder(settings, package))
    return True
