"""A definition's versions: revert to one (a new draft) and delete one (only a draft: published
versions stay in the history, as instances ran on them)."""

from __future__ import annotations

from typing import Any

from broker.console.api.base import blueprint
from broker.console.api.definitions.routes import by_version_id, one
from broker.console.api.definitions.views import Version, summary
from broker.console.api.params import VersionOptions
from broker.console.roles import current, require
from broker.errors import BadRequest, NotFound
from broker.ingress.context import transaction
from broker.runtime.admin import drafts as store


def delete_version_txn(v: Version) -> int:
    """Delete ``v`` when it is a draft (1); refuse any stored version with the reason."""
    if not v.is_draft:
        raise BadRequest(
            f"Version {v.version} of '{v.definition_id}' stays in the version history "
            "(instances may have run on it); only a draft can be deleted"
        )
    with transaction() as session:
        return 1 if store.delete_draft_txn(session, v.definition_id) else 0


@blueprint.delete("/workflow-definition-versions/<version_id>")
@require("designer")
def delete_version(version_id: str) -> tuple[str, int]:
    delete_version_txn(by_version_id(version_id))
    return "", 204


@blueprint.delete("/workflow-definitions/<definition_id>/version/<int:version>")
@require("designer")
def delete_version_number(definition_id: str, version: int) -> tuple[str, int]:
    delete_version_txn(one(definition_id, VersionOptions.parse(str(version), "Latest")))
    return "", 204


@blueprint.post("/workflow-definitions/<definition_id>/revert/<int:version>")
@require("designer")
def revert(definition_id: str, version: int) -> tuple[dict[str, Any], int]:
    """Elsa's revert: version ``version``'s content becomes the new draft (201, its summary)."""
    chosen = one(definition_id, VersionOptions.parse(str(version), "Latest"))
    if chosen.version != version:
        raise NotFound(f"Workflow definition '{definition_id}' has no version {version}")
    doc = {k: v for k, v in chosen.document.items() if k not in ("id", "version")}
    principal = current()
    with transaction() as session:
        store.save_draft_txn(session, definition_id, doc, principal.name if principal else None)
    return summary(one(definition_id, VersionOptions("Latest"))), 201
