#!/usr/bin/env bash
# Installs what `make test` needs beyond Rust and Python, on Debian 12 (x86_64): a C and C++ compiler, valgrind,
# cmake and pkg-config (the installed library's consumer check, tests/c/check_install.sh), HAProxy (make test-scale),
# clippy and rustfmt, Go >= 1.23 (from bookworm-backports: Debian 12's own golang-go is 1.19, and no Go module
# proxy is reachable, so the binding and the gateway use the standard library only) and six Python packages:
# `openai`, `anthropic` and `ollama` (the gateway's end-to-end tests, each API with its official client),
# `prometheus_client` (its parser checks `/metrics` in that test),
# `gguf` with numpy (the independent reference of every weight type's dequantization,
# tests/dequantize_reference.rs) and `kubernetes-validate` (Kubernetes' schemas, offline, for deploy/kubernetes/ in
# make lint). NVRTC, for the CUDA kernels' compile test, is fetched by scripts/fetch-nvrtc.sh when the tests run;
# the model by scripts/fetch-model.sh.
#
# `make test` runs this first. Idempotent and quiet when everything is there: it checks each tool and installs only
# what is missing. System packages need root: it runs apt-get as root, or through `sudo -n` when that works without
# a password; otherwise it names what is missing and the one command that installs it, and fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo "$@"
  else
    echo "error: make test needs ${missing[*]}; install them with: sudo scripts/install-test-tools.sh" >&2
    exit 1
  fi
}

# Where apt's sources are (a test may point it elsewhere).
APT_DIR=${EMBER_APT_DIR:-/etc/apt}

# Adds Debian's bookworm-backports suite, from the first source of the main archive, in that source's format:
# Debian 12's container images keep their sources in the deb822 file sources.list.d/debian.sources, a Debian
# installed from its ISO in the one-line format of sources.list.
add_backports_source() {
  if [ -f "$APT_DIR/sources.list.d/debian.sources" ]; then
    awk 'BEGIN{RS="";ORS="\n\n"} NR==1' "$APT_DIR/sources.list.d/debian.sources" \
      | sed 's/^Suites:.*/Suites: bookworm-backports/' \
      | as_root tee "$APT_DIR/sources.list.d/bookworm-backports.sources" >/dev/null
  elif grep -qE '^deb .* bookworm( |$)' "$APT_DIR/sources.list" 2>/dev/null; then
    # The first `deb` line of bookworm itself (not bookworm-security or -updates), with the backports suite.
    grep -m1 -E '^deb .* bookworm( |$)' "$APT_DIR/sources.list" \
      | sed -E 's/ bookworm( |$)/ bookworm-backports\1/' \
      | as_root tee "$APT_DIR/sources.list.d/bookworm-backports.list" >/dev/null
  else
    echo "error: found no Debian 12 (bookworm) source to add bookworm-backports from (Go >= 1.23 comes from" \
      "there), neither in $APT_DIR/sources.list.d/debian.sources nor in $APT_DIR/sources.list" >&2
    exit 1
  fi
}

go_is_recent() {
  GOTOOLCHAIN=local go version 2>/dev/null | grep -qE 'go1\.(2[3-9]|[3-9][0-9])'
}

# `install-test-tools.sh --add-backports-source`: only that step (tests/install_test_tools.sh checks it on both
# sources formats).
if [ "${1:-}" = --add-backports-source ]; then
  missing=("the bookworm-backports source")
  add_backports_source
  exit 0
fi

missing=()
apt_packages=()
for tool in gcc g++ valgrind make cmake pkg-config; do
  command -v "$tool" >/dev/null || { missing+=("$tool"); apt_packages+=("$tool"); }
done
# make test-scale balances three gateways with HAProxy (in /usr/sbin, which a user's PATH may lack).
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || { missing+=(haproxy); apt_packages+=(haproxy); }
python3 -m pip --version >/dev/null 2>&1 || { missing+=(pip); apt_packages+=(python3-pip); }
# The Python binding's test builds its wheel into a fresh virtual environment; Debian's Python needs python3-venv.
python3 -c 'import ensurepip, venv' 2>/dev/null || { missing+=("Python's venv"); apt_packages+=(python3-venv); }
need_go=false
go_is_recent || { missing+=("Go >= 1.23"); need_go=true; }
python_packages=()
python3 -c 'import openai' 2>/dev/null || { missing+=("the openai Python package"); python_packages+=(openai); }
# The gateway's other APIs are tested with their own official clients (tests/e2e/test_gateway_apis.py).
python3 -c 'import anthropic' 2>/dev/null || { missing+=("the anthropic Python package"); python_packages+=(anthropic); }
python3 -c 'import ollama' 2>/dev/null || { missing+=("the ollama Python package"); python_packages+=(ollama); }
python3 -c 'import prometheus_client' 2>/dev/null \
  || { missing+=("the prometheus_client Python package"); python_packages+=(prometheus_client); }
python3 -c 'import gguf, numpy, importlib.metadata as m; assert m.version("gguf") == "0.19.0"' 2>/dev/null \
  || { missing+=("the gguf 0.19.0 Python package"); python_packages+=(gguf==0.19.0); }
python3 -c 'import kubernetes_validate, importlib.metadata as m; assert m.version("kubernetes-validate") == "1.37.0"' \
  2>/dev/null || { missing+=("the kubernetes-validate 1.37.0 Python package"); python_packages+=(kubernetes-validate==1.37.0); }
need_components=false
rustup component list --installed 2>/dev/null | grep -q '^clippy' \
  && rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || need_components=true

if [ ${#missing[@]} -eq 0 ] && ! $need_components; then
  exit 0
fi
[ ${#missing[@]} -gt 0 ] && echo "installing what make test needs: ${missing[*]}" >&2

export DEBIAN_FRONTEND=noninteractive
if [ ${#apt_packages[@]} -gt 0 ] || $need_go; then
  $need_go && add_backports_source
  as_root apt-get update -qq
  [ ${#apt_packages[@]} -gt 0 ] && as_root apt-get install -y -qq "${apt_packages[@]}"
  $need_go && as_root apt-get install -y -qq -t bookworm-backports golang-go
fi
if [ ${#python_packages[@]} -gt 0 ]; then
  # A Python whose packages the system manages (PEP 668) takes them per user.
  python3 -m pip install --quiet --disable-pip-version-check "${python_packages[@]}" 2>/dev/null \
    || python3 -m pip install --quiet --disable-pip-version-check --user --break-system-packages "${python_packages[@]}"
fi
if $need_components; then
  rustup component add clippy rustfmt
fi
go_is_recent || { echo "error: Go >= 1.23 is still missing after installing golang-go" >&2; exit 1; }
