"""Elsa activity descriptors generated from the engine's catalog and its activity specs."""

from __future__ import annotations

import re
from typing import Any

from broker.engine.activities.catalog import CATALOG, TYPE_ALIASES
from broker.engine.activities.descriptors import spec_for
from broker.engine.model.specs import ActivitySpec, InputSpec, OutputSpec, ui_hint_for
from broker.errors import ConfigError

_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def humanize(name: str) -> str:
    """``SendHttpRequest`` -> ``Send Http Request`` (Elsa's Humanize(Title))."""
    return " ".join(w[:1].upper() + w[1:] for w in _WORDS.findall(name))


def split_type(type_name: str) -> tuple[str, str]:
    """``Elsa.Http.HttpEndpoint`` -> (``Elsa.Http``, ``HttpEndpoint``)."""
    namespace, _, name = type_name.rpartition(".")
    return namespace or "Elsa", name


def ui_specifications(spec: InputSpec, hint: str) -> dict[str, Any] | None:
    """The UI-hint data an input needs: the items of a dropdown or check list."""
    if not spec.options:
        return None
    if hint == "checklist":
        checked = set(spec.default or ()) if isinstance(spec.default, list) else set()
        items = [{"text": o, "value": o, "isChecked": o in checked} for o in spec.options]
        return {"checklist": {"checkList": {"items": items, "isFlagsEnum": False}}}
    items = [{"text": o, "value": o} for o in spec.options]
    return {"dropdown": {"selectList": {"items": items, "isFlagsEnum": False, "sortItems": False}}}


def input_descriptor(spec: InputSpec, order: int) -> dict[str, Any]:
    hint = ui_hint_for(spec)
    return {
        "name": spec.name,
        "typeName": spec.type_name,
        "displayName": humanize(spec.name),
        "description": spec.description or None,
        "order": order,
        "isBrowsable": spec.browsable,
        "isSerializable": True,
        "isSynthetic": False,
        "isWrapped": spec.wrapped,
        "uiHint": hint,
        "category": None,
        "defaultValue": spec.default,
        "defaultSyntax": spec.syntax or ("Literal" if spec.wrapped else None),
        "isReadOnly": False,
        "isSensitive": False,
        "storageDriverType": None,
        "uiSpecifications": ui_specifications(spec, hint),
    }


def output_descriptor(spec: OutputSpec, order: int) -> dict[str, Any]:
    return {
        "name": spec.name,
        "typeName": spec.type_name,
        "displayName": humanize(spec.name),
        "description": spec.description or None,
        "order": order,
        "isBrowsable": True,
        "isSerializable": True,
        "isSynthetic": False,
    }


def describe(
    type_name: str, spec: ActivitySpec, *, browsable: bool | None = None
) -> dict[str, Any]:
    """One Elsa ``ActivityDescriptor`` (version 1, as every activity of the engine is)."""
    namespace, name = split_type(type_name)
    ports = [
        {"name": p, "displayName": humanize(p), "type": "Embedded", "isBrowsable": True}
        for p in spec.ports
    ] + [{"name": o, "displayName": o, "type": "Flow", "isBrowsable": True} for o in spec.outcomes]
    return {
        "typeName": type_name,
        "namespace": namespace,
        "name": name,
        "version": 1,
        "category": spec.category,
        "displayName": spec.display_name or humanize(name),
        "description": spec.description,
        "inputs": [input_descriptor(i, n) for n, i in enumerate(spec.inputs)],
        "outputs": [output_descriptor(o, n) for n, o in enumerate(spec.outputs)],
        "kind": spec.kind,
        "ports": ports,
        "customProperties": {},
        "constructionProperties": {},
        "isContainer": spec.container,
        "isBrowsable": spec.browsable if browsable is None else browsable,
        "isStart": spec.start,
        "isTerminal": spec.terminal,
    }


def activity_descriptors() -> list[dict[str, Any]]:
    """A descriptor for every type in the catalog, aliases last; raises ``ConfigError`` naming
    any type whose implementation has no spec (a test keeps that from shipping)."""
    found: list[dict[str, Any]] = []
    missing: list[str] = []
    for type_name, behaviour in CATALOG.items():
        spec = spec_for(behaviour)
        if spec is None:
            missing.append(type_name)
            continue
        alias = type_name in TYPE_ALIASES
        found.append(describe(type_name, spec, browsable=False if alias else None))
    if missing:
        raise ConfigError(f"activity types without a descriptor: {', '.join(sorted(missing))}")
    return found
