#!/usr/bin/env bash
# scripts/install-test-tools.sh adds Debian's bookworm-backports suite (Go >= 1.23 comes from it) in the format of
# the machine's sources: the deb822 file of Debian's container images, or the one-line sources.list of a Debian
# installed from its ISO. This runs that step on both layouts (and on neither) in a scratch directory, and checks
# what it writes. `make test` runs it (`make lint`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
apt=$(mktemp -d)
trap 'rm -rf "$apt"' EXIT
add() { EMBER_APT_DIR="$apt" scripts/install-test-tools.sh --add-backports-source; }
expect() {
  if [ "$(cat "$1")" != "$2" ]; then
    printf 'install_test_tools: %s is\n%s\nexpected\n%s\n' "$1" "$(cat "$1")" "$2" >&2
    exit 1
  fi
}

# The one-line format: bookworm's own line (not -updates or -security), options in brackets kept.
mkdir -p "$apt/sources.list.d"
cat > "$apt/sources.list" <<'LIST'
# deb cdrom:[Debian GNU/Linux 12.5.0 _Bookworm_]/ bookworm main
deb http://security.debian.org/debian-security bookworm-security main
deb [arch=amd64] http://deb.debian.org/debian bookworm main non-free-firmware
deb http://deb.debian.org/debian bookworm-updates main
LIST
add
expect "$apt/sources.list.d/bookworm-backports.list" \
  "deb [arch=amd64] http://deb.debian.org/debian bookworm-backports main non-free-firmware"

# The deb822 format: the first stanza, its suite replaced.
rm -f "$apt/sources.list" "$apt/sources.list.d/"*
cat > "$apt/sources.list.d/debian.sources" <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
SOURCES
add
expect "$apt/sources.list.d/bookworm-backports.sources" "$(printf '%s\n' 'Types: deb' \
  'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' 'Components: main' \
  'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg')"

# Neither: a clear error, nothing written.
rm -f "$apt/sources.list.d/"*
if add 2>"$apt/err"; then
  echo "install_test_tools: no sources at all was accepted" >&2
  exit 1
fi
grep -q "found no Debian 12 (bookworm) source" "$apt/err"
[ -z "$(ls "$apt/sources.list.d")" ]
echo "install_test_tools: both sources layouts ok"
