#!/usr/bin/env python3
"""Mechanical truth checks on README.md and docs/*.md (make lint): a claim about what ran where names the test or
measurement behind it, and what it names exists.

- The README's family table: every row names, in its "checked against" column, a test file (`tests/NAME.rs`);
  its CUDA cell says "CPU emulation only" and names the emulation check behind it (`scripts/gpu-check.sh
  emulate` or a `tests/cuda_*.rs`), unless it names a GPU run: the results of `scripts/gpu-check.sh run`, committed
  under docs/gpu-runs/ and named in the cell. Until such a run exists, no cell can claim more. No row stands apart
  from the table (a blank line before it makes Markdown render it as text).
- The README names no GPU model (H100, H200, A100, ...) on a line that does not name a GPU run under docs/gpu-runs/:
  what ran on which GPU is a measurement, never a description.
- Every repository path written in backquotes in README.md and docs/*.md exists (globs and placeholders aside): a
  test or script named as evidence that is not there backs nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
FAMILY_HEADER = "| family | architecture, tokenizer | CPU | CUDA | checked against |"
EMULATION_ONLY = "CPU emulation only"
GPU_RUN = re.compile(r"`(docs/gpu-runs/[^`]+)`")
TEST_FILE = re.compile(r"`(tests/[\w/.-]+\.rs)`")
EMULATION_CHECK = re.compile(r"`scripts/gpu-check\.sh emulate`|`tests/cuda_\w+\.rs`")
GPU_MODELS = re.compile(r"\b(H100|H200|H20|A100|A10G?|L4|L40S?|V100|T4|B200|GB200|RTX ?\d{4}|MI\d{3}X?)\b")
PATH_IN_QUOTES = re.compile(r"`((?:tests|scripts|examples|bindings|deploy|packaging|benches|src|include|docs)/[^`\s]*)`")
failures: List[str] = []


def check(condition: bool, message: str) -> None:
    if not condition:
        failures.append(message)


def gpu_runs_named(text: str) -> List[str]:
    """The GPU runs a line names, each checked to exist."""
    runs = GPU_RUN.findall(text)
    for run in runs:
        check((ROOT / run).is_file(), f"the GPU run {run} is not in the repository")
    return runs


def cells(row: str) -> List[str]:
    return [cell.strip() for cell in row.strip().strip("|").split(" | ")]


def check_family_table(readme: List[str]) -> int:
    starts = [i for i, line in enumerate(readme) if line.strip() == FAMILY_HEADER]
    check(len(starts) == 1, f"README.md: expected one family table headed {FAMILY_HEADER!r}, found {len(starts)}")
    if len(starts) != 1:
        return 0
    i = starts[0] + 2  # past the header and its separator
    rows = 0
    while i < len(readme) and readme[i].startswith("|"):
        line_number, row = i + 1, cells(readme[i])
        i += 1
        where = f"README.md:{line_number}: family {row[0][:40]!r}"
        if len(row) != 5:
            failures.append(f"{where}: {len(row)} cells, not 5")
            continue
        rows += 1
        _, _, _, cuda, checked = row
        check(TEST_FILE.search(checked) is not None,
              f"{where}: the 'checked against' column names no test (`tests/NAME.rs`)")
        for test in TEST_FILE.findall(" ".join(row)):
            check((ROOT / test).is_file(), f"{where}: {test} does not exist")
        if not gpu_runs_named(cuda):
            check(EMULATION_ONLY in cuda, f"{where}: the CUDA cell must say {EMULATION_ONLY!r} (no GPU run is named "
                  "in it: docs/gpu-runs/...)")
            check(EMULATION_CHECK.search(cuda) is not None,
                  f"{where}: the CUDA cell names no emulation check (`scripts/gpu-check.sh emulate`, tests/cuda_*.rs)")
    # A row after a blank line is no longer part of the table.
    j = i
    while j < len(readme) and not readme[j].strip():
        j += 1
    if j > i and j < len(readme) and readme[j].startswith("|") and len(cells(readme[j])) == 5 \
            and not (j + 1 < len(readme) and re.match(r"\|\s*-", readme[j + 1])):
        failures.append(f"README.md:{j + 1}: a family row separated from its table by a blank line")
    check(rows > 0, "README.md: the family table has no rows")
    return rows


def check_gpu_names(readme: List[str]) -> None:
    for number, line in enumerate(readme, 1):
        found = GPU_MODELS.search(line)
        if found and not gpu_runs_named(line):
            failures.append(f"README.md:{number}: names the GPU {found.group(1)} without a GPU run (docs/gpu-runs/...) "
                            "beside it")


def check_paths(documents: List[Path]) -> int:
    named = 0
    for document in documents:
        for number, line in enumerate(document.read_text().splitlines(), 1):
            for path in PATH_IN_QUOTES.findall(line):
                path = path.rstrip(".,:;)")
                if any(mark in path for mark in ("*", "{", "<", "...", "…", "$")):
                    continue  # a glob or a placeholder
                named += 1
                check((ROOT / path).exists(), f"{document.relative_to(ROOT)}:{number}: `{path}` does not exist")
    return named


def main() -> int:
    readme = (ROOT / "README.md").read_text().splitlines()
    rows = check_family_table(readme)
    check_gpu_names(readme)
    paths = check_paths([ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")))
    for failure in failures:
        print(f"check_readme_claims: {failure}", file=sys.stderr)
    if not failures:
        print(f"check_readme_claims: ok ({rows} family rows, each with its test and CUDA under the emulation only; "
              f"{paths} paths named in README.md and docs/ exist)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
