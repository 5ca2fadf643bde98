"""How the operator commands print: JSON for scripts (``--json``), tables and fields for eyes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import click


def emit(value: Any, as_json: bool, human: Callable[[], None]) -> None:
    if as_json:
        click.echo(json.dumps(value, indent=2, default=str))
    else:
        human()


def page_of(
    items: Sequence[Any], *, page: int = 0, page_size: int | None = None, total: int | None = None
) -> dict[str, Any]:
    """A list as ``--json`` prints every list: the API's ``{items, totalCount, page, pageSize}``
    (the whole list is one page unless the caller fetched one page of a longer one)."""
    return {
        "items": list(items),
        "totalCount": len(items) if total is None else total,
        "page": page,
        "pageSize": len(items) if page_size is None else page_size,
    }


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
    """A plain aligned table (scripts use ``--json``; this is for eyes)."""
    cells = [[("" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    for line in (list(headers), *cells):
        click.echo("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


def fields(record: dict[str, Any], names: Iterable[str]) -> None:
    width = max(len(n) for n in names)
    for name in names:
        value = record.get(name)
        shown = json.dumps(value) if isinstance(value, dict | list) else value
        click.echo(f"{name.ljust(width)}  {'' if shown is None else shown}")
