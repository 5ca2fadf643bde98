"""``broker workflows``: list, validate and draw the workflow files (no running services needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from broker.errors import WorkflowDefinitionError
from broker.settings import get_settings


@click.group()
def workflows() -> None:
    """List, validate and draw workflow files."""


@workflows.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def list_workflows(as_json: bool) -> None:
    """List the workflows found in BROKER_WORKFLOW_PATHS and any problems (exit 1 if any)."""
    from broker.registry import WorkflowRegistry

    registry = WorkflowRegistry(get_settings().replace(watch_workflows=False))
    registry.load()  # without a session factory: scans the folders, publishes nothing
    rows = [
        {
            "definitionId": w.definition_id,
            "version": w.version,
            "name": w.name,
            "requestType": w.request_type,
            "queue": w.queue,
            "file": w.source_path,
        }
        for w in registry.definitions()
    ]
    problems = [{"file": p.file, "reason": p.reason} for p in registry.problems]
    if as_json:
        click.echo(json.dumps({"workflows": rows, "problems": problems}, indent=2))
    else:
        for row in rows:
            click.echo(
                f"{row['requestType'] or '-':<24} {row['definitionId']:<28} "
                f"v{row['version']:<4} {row['queue'] or '-':<28} {row['file']}"
            )
        for p in problems:
            click.echo(f"PROBLEM {p['file']}: {p['reason']}", err=True)
    sys.exit(1 if problems else 0)


def _load(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8-sig")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkflowDefinitionError(f"invalid JSON: {exc}", file=str(path)) from exc
    if not isinstance(document, dict):
        raise WorkflowDefinitionError("a workflow file holds a JSON object", file=str(path))
    return document


@workflows.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate(files: tuple[Path, ...]) -> None:
    """Validate workflow FILES (default: every file in BROKER_WORKFLOW_PATHS); exit 1 on errors."""
    from broker.engine.definition import parse_workflow

    if not files:
        roots = [Path(p) for p in get_settings().workflow_paths]
        files = tuple(sorted(f for root in roots for f in root.rglob("*.json")))
    failed = 0
    for path in files:
        try:
            parse_workflow(_load(path), file=str(path))
        except WorkflowDefinitionError as exc:
            failed += 1
            click.echo(f"INVALID {exc}", err=True)
        else:
            click.echo(f"ok      {path}")
    sys.exit(1 if failed else 0)


@workflows.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def diagram(file: Path) -> None:
    """Print FILE's activity graph as a Mermaid flowchart."""
    from broker.engine.diagram import to_mermaid

    try:
        click.echo(to_mermaid(_load(file)))
    except WorkflowDefinitionError as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
