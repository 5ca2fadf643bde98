"""The ledgers: one TSV per upstream suite under ``tests/conformance/upstream``, one row per
upstream test: ported (its case ids), not implemented (what the broker lacks) or not portable
(why nothing a workflow can observe is checked)."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

LEDGERS = Path(__file__).resolve().parent / "upstream"
HEADER = ("file", "test", "status", "case", "reason")
STATUSES = ("ported", "not_implemented", "not_portable")
#: a not_implemented row's reason starts so, then names the missing piece before a colon
NEEDS = "needs "
#: the activity inventory beside the ledgers, which is not a ledger of tests
INVENTORY = "activities.tsv"


class LedgerError(ValueError):
    """Raised when a ledger row is malformed; names the file and line."""


@dataclasses.dataclass(frozen=True)
class Row:
    suite: str  # the ledger's file name without .tsv
    file: str  # the C# test file in elsa-core
    test: str  # the test method
    status: str
    cases: tuple[str, ...]
    reason: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.suite}.tsv:{self.line}"

    @property
    def needs(self) -> str:
        """The missing piece a not_implemented row names (``needs X: detail`` gives ``X``)."""
        if self.status != "not_implemented":
            return ""
        return self.reason.removeprefix(NEEDS).split(":", 1)[0].strip()


def ledger_files() -> list[Path]:
    return sorted(p for p in LEDGERS.glob("*.tsv") if p.name != INVENTORY)


def read_ledger(path: Path) -> list[Row]:
    suite = path.stem
    rows = []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if tuple(header or ()) != HEADER:
            raise LedgerError(f"{path.name}:1: the header must be {'<TAB>'.join(HEADER)}")
        for number, fields in enumerate(reader, start=2):
            if not fields:
                continue
            if len(fields) != len(HEADER):
                raise LedgerError(f"{path.name}:{number}: {len(fields)} fields, want 5")
            file, test, status, case, reason = (f.strip() for f in fields)
            cases = tuple(c.strip() for c in case.split(",") if c.strip())
            rows.append(Row(suite, file, test, status, cases, reason, number))
    return rows


def read_ledgers() -> list[Row]:
    return [row for path in ledger_files() for row in read_ledger(path)]


def problems(row: Row) -> list[str]:
    """What is wrong with one row, each as a sentence (empty when it is well formed)."""
    found = []
    if not row.file.startswith("test/") or not row.file.endswith(".cs"):
        found.append("file must be the C# test file's path in elsa-core (test/...cs)")
    if not row.test.isidentifier():
        found.append("test must be the test method's name")
    if row.status not in STATUSES:
        found.append(f"status must be one of {', '.join(STATUSES)}")
    if row.status == "ported" and not row.cases:
        found.append("a ported row names its case id(s)")
    if row.status == "not_portable" and (row.cases or not row.reason):
        found.append("a not_portable row gives a reason and no case")
    if row.status == "not_implemented" and (row.cases or not row.reason.startswith(NEEDS)):
        found.append(
            f"a not_implemented row has no case and a reason '{NEEDS}<missing piece>: ...'"
        )
    return [f"{row.where}: {problem}" for problem in found]
