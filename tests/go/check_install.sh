#!/usr/bin/env bash
# The Go binding as a program outside this repository sees it (docs/go.md, "A Go program elsewhere"): `make
# install` into a scratch prefix; a module in another scratch directory requires ember.invalid/ember/bindings/go
# from the installed module proxy (no `replace`, no path into this checkout, no network: GOPROXY is the proxy
# alone), links the installed library through pkg-config (the binding's default, no build tag), and answers a
# question on the model. Checked: the program needs libember.so.MAJOR and loads it from the prefix, its answer
# names 100 degrees, and the module it built is the installed one.
#   tests/go/check_install.sh [MODEL]   (default: models/SmolLM2-135M-Instruct.Q4_1.gguf; make go-test runs it)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo="$(pwd)"
model="$(realpath "${1:-${EMBER_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}}")"

fail() {
  echo "go check_install: $*" >&2
  exit 1
}

scratch="$(mktemp -d)"
# The module cache is made writable (-modcacherw) so that it can be removed with the rest.
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
prefix="$scratch/prefix"
make -s install PREFIX="$prefix" >"$scratch/install.log" 2>&1 || { cat "$scratch/install.log" >&2; fail "make install failed"; }
major="$(sed -n 's/^#define EMBER_VERSION_MAJOR \([0-9]*\)$/\1/p' include/ember.h)"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"

app="$scratch/app"
mkdir -p "$app"
cp tests/go/install_consumer/main.go "$app/"
cat >"$app/go.mod" <<EOF
module installcheck

go 1.23

require ember.invalid/ember/bindings/go v$version
EOF

# Only the installed proxy (",off": nothing else is asked), this scratch module cache, no tags: what a program
# elsewhere gets. GOFLAGS is cleared so that go.mk's ember_in_repo tag cannot leak in.
export GOTOOLCHAIN=local CGO_ENABLED=1 GOFLAGS=-modcacherw GOPROXY="file://$prefix/share/ember/go-proxy,off"
export GONOSUMDB=ember.invalid GOMODCACHE="$scratch/modcache" GOWORK=off
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CGO_LDFLAGS="-Wl,-rpath,$prefix/lib"
(cd "$app" && go mod tidy && go vet ./... && go build -o "$scratch/installcheck" .) ||
  fail "the program did not build against the installed binding"

# The module came from the proxy, not from this checkout.
source_dir="$(cd "$app" && go list -m -f '{{.Dir}}' ember.invalid/ember/bindings/go)"
case "$source_dir" in
  "$scratch/modcache/"*) ;;
  *) fail "the binding came from $source_dir, not the installed proxy" ;;
esac
grep -q 'pkg-config: ember' "$source_dir/link_installed.go" || fail "the installed binding does not link through pkg-config"

# The installed shared library, by its SONAME, from the prefix.
readelf -d "$scratch/installcheck" | grep -q "(NEEDED).*\[libember.so.$major\]" ||
  fail "the program does not need libember.so.$major"
loaded="$(ldd "$scratch/installcheck" | sed -n "s/.*libember.so.$major => \([^ ]*\).*/\1/p")"
[ "$loaded" = "$prefix/lib/libember.so.$major" ] || fail "libember.so.$major loads from '$loaded', not $prefix/lib"
case "$loaded" in "$repo"/*) fail "libember comes from the checkout" ;; esac

output="$(cd "$scratch" && "$scratch/installcheck" "$model")" || fail "the program failed: $output"
echo "$output"
grep -q "^version $version$" <<<"$output" || fail "the library's version is not $version"
grep -q '^answer .*100' <<<"$output" || fail "the answer does not name 100 degrees"
echo "go check_install: ok (ember.invalid/ember/bindings/go v$version from $prefix, libember.so.$major through pkg-config)"
