"""Elsa Studio's and mermaid.js's files, as a CDN would serve them (docs/design.md, section 1)."""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from flask import Blueprint, Response, abort, jsonify, request, send_file
from werkzeug.security import safe_join

from broker.console import assets
from broker.settings import Settings
from broker.web.context import services

bp = Blueprint("studio", __name__)

YEAR = 365 * 24 * 3600
# Blazor's fingerprint: a dot, ten lowercase letters or digits, a dot, the extension.
FINGERPRINT = re.compile(r"\.[a-z0-9]{10}\.[A-Za-z0-9]+$")
ENCODINGS = (("br", ".br"), ("gzip", ".gz"))
TYPES = {
    ".wasm": "application/wasm",
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".json": "application/json",
    ".css": "text/css",
    ".dat": "application/octet-stream",
    ".blat": "application/octet-stream",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".ttf": "font/ttf",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".cur": "image/x-icon",
    ".map": "application/json",
    ".webmanifest": "application/manifest+json",
    ".html": "text/html",
}


def _settings() -> Settings:
    return services().settings


def mime_type(name: str) -> str:
    suffix = Path(name).suffix.lower()
    return TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"


def _accepts(encoding: str) -> bool:
    return request.accept_encodings[encoding] > 0


def serve(root: Path, relative: str) -> Response:
    """One file of a package folder, precompressed when possible, with its cache policy."""
    if relative.endswith((".br", ".gz")) or Path(relative).name.startswith("."):
        abort(404)  # the twins are sent in place of their file, never asked for by name
    joined = safe_join(str(root), relative)
    if joined is None or not Path(joined).is_file():
        abort(404)
    path = Path(joined)
    encoding = None
    for name, suffix in ENCODINGS:
        twin = path.with_name(path.name + suffix)
        if _accepts(name) and twin.is_file():
            path, encoding = twin, name
            break
    fingerprinted = FINGERPRINT.search(relative) is not None
    response = send_file(
        path,
        mimetype=mime_type(relative),
        conditional=True,
        etag=True,
        max_age=YEAR if fingerprinted else None,  # None: revalidate every time (no-cache)
    )
    if encoding is not None:
        response.headers["Content-Encoding"] = encoding
    response.vary.add("Accept-Encoding")
    if fingerprinted:
        response.cache_control.immutable = True
    return response


def _studio_root() -> Path:
    if not assets.installed(_settings(), assets.STUDIO):
        abort(404)
    return assets.folder(_settings(), assets.STUDIO)


@bp.get("/_framework/<path:relative>")
def framework(relative: str) -> Response:
    return serve(_studio_root(), f"_framework/{relative}")


@bp.get("/_content/<path:relative>")
def content(relative: str) -> Response:
    return serve(_studio_root(), f"_content/{relative}")


@bp.get("/Elsa.Studio.Host.CustomElements.styles.css")
def studio_styles() -> Response:
    return serve(_studio_root(), "Elsa.Studio.Host.CustomElements.styles.css")


@bp.get("/appsettings.json")
def app_settings() -> Response:
    # Studio reads this at boot; the elements get the API address as an attribute, and this
    # points the rest of Studio at the same place rather than at the package's localhost:5001.
    _studio_root()
    return jsonify({"Backend": {"Url": request.host_url + "elsa/api"}})


@bp.get("/console-assets/mermaid/<path:relative>")
def mermaid(relative: str) -> Response:
    if not assets.installed(_settings(), assets.MERMAID):
        abort(404)
    return serve(assets.folder(_settings(), assets.MERMAID) / "dist", relative)


@bp.get("/favicon.ico")
def favicon() -> Response:
    # Browsers ask for it on every page; the console has none, and says so without a 404.
    return Response(status=204)
