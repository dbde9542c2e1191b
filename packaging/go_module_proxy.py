#!/usr/bin/env python3
"""Writes the Go binding as a module proxy in a directory (`make install`: $PREFIX/share/ember/go-proxy).

A Go program outside this repository then requires the binding by its module path and version, with no `replace`
and no checkout of ember: `GOPROXY=file://$PREFIX/share/ember/go-proxy,$(go env GOPROXY)` and
`GONOSUMDB=ember.invalid` (the module is published nowhere, so no checksum database knows it). The layout is Go's
module proxy protocol (`go help goproxy`): <module>/@v/list, <version>.info, <version>.mod and <version>.zip, the
zip holding each file under <module>@<version>/. docs/go.md says how a program uses it; tests/go/check_install.sh
builds one against it.

    packaging/go_module_proxy.py OUT_DIR VERSION [BINDING_DIR]
"""

from __future__ import annotations

import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A fixed time for every entry, so that installing twice writes the same zip.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


def module_path(go_mod: str) -> str:
    match = re.search(r"^module\s+(\S+)\s*$", go_mod, re.M)
    if match is None:
        sys.exit("go_module_proxy: no module line in go.mod")
    path = match.group(1)
    # The proxy escapes capitals as !lower; the binding's path has none, and escaping is not implemented.
    if path != path.lower():
        sys.exit(f"go_module_proxy: module path {path} has capitals")
    return path


def main() -> int:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    out, version = Path(sys.argv[1]), "v" + sys.argv[2].lstrip("v")
    binding = Path(sys.argv[3]) if len(sys.argv) == 4 else ROOT / "bindings" / "go"
    go_mod = (binding / "go.mod").read_text()
    path = module_path(go_mod)
    # The package's files; its tests stay behind (they need the repository's models and tools).
    files = sorted(f for f in binding.iterdir()
                   if f.is_file() and f.suffix in (".go", ".c", ".h") and not f.name.endswith("_test.go"))
    versions = out / path / "@v"
    versions.mkdir(parents=True, exist_ok=True)
    (versions / "list").write_text(version + "\n")
    (versions / f"{version}.info").write_text(json.dumps({"Version": version}) + "\n")
    (versions / f"{version}.mod").write_text(go_mod)
    with zipfile.ZipFile(versions / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for file in [binding / "go.mod"] + files:
            entry = zipfile.ZipInfo(f"{path}@{version}/{file.name}", ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, file.read_bytes())
    print(f"go_module_proxy: {path}@{version}, {len(files)} files, in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
