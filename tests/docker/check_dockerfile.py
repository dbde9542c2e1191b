#!/usr/bin/env python3
"""Checks the Dockerfile offline, as far as a machine without a Docker engine can (make lint): its stages and
what each takes from the others, that the build context carries what the build copies and never the models or
build outputs, the runtime's non-root user and health check, and that every gateway flag it passes exists, with
the port, model path and toolchain versions agreeing with the rest of the repository; that the last stage (what
`docker build .` builds) is `runtime`, under the tag docs/deploy.md and the manifests use; and that the image
carries ember-cli with the hub cache (HF_HOME) on the model volume.

What it cannot check is the build itself (the base images' contents, the network); docs/deploy.md says so."""

from __future__ import annotations

import fnmatch
import re
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[2]
failures: List[str] = []


def check(condition: bool, message: str) -> None:
    if not condition:
        failures.append(message)


def instructions(text: str) -> List[Tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, continuation lines joined."""
    out: List[Tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        keyword, _, rest = full.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def version_tuple(text: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def main() -> int:
    dockerfile = (ROOT / "Dockerfile").read_text()
    ignored = [l.strip() for l in (ROOT / ".dockerignore").read_text().splitlines()
               if l.strip() and not l.startswith("#")]
    steps = instructions(dockerfile)

    # Stages, and what each one holds.
    stages: Dict[str, List[Tuple[str, str]]] = {}
    bases: Dict[str, str] = {}
    current = ""
    for keyword, rest in steps:
        if keyword == "FROM":
            parts = rest.split()
            image = parts[0]
            check(len(parts) == 3 and parts[1].upper() == "AS", f"FROM {rest}: every stage is named")
            current = parts[-1]
            check(current not in stages, f"stage {current} is named twice")
            if image in stages:
                stages[current] = list(stages[image])  # a stage built on another one inherits its settings
            else:
                check(":" in image and not image.endswith(":latest"), f"FROM {image}: pin the image's version")
                stages[current] = []
            bases[current] = image
            continue
        check(current != "", f"{keyword} before any FROM")
        stages[current].append((keyword, rest))

    for name, body in stages.items():
        for keyword, rest in body:
            if keyword != "COPY":
                continue
            args = shlex.split(rest)
            sources = [a for a in args if not a.startswith("--")][:-1]
            source_stage = next((a.split("=", 1)[1] for a in args if a.startswith("--from=")), None)
            if source_stage is not None:
                check(source_stage in stages or ":" in source_stage,
                      f"{name}: COPY --from={source_stage} names no earlier stage and no pinned image")
                continue
            for source in sources:
                if source == ".":
                    for needed in ("target", "models", ".git", ".cache"):
                        check(needed in ignored, f".dockerignore must exclude {needed}: `COPY . .` would send it")
                    continue
                check((ROOT / source).exists(), f"{name}: COPY {source}: not in the repository")
                check(not any(fnmatch.fnmatch(source, pattern) for pattern in ignored),
                      f"{name}: COPY {source}: excluded by .dockerignore")

    # The toolchains are at least the versions the repository asks for.
    cargo = (ROOT / "Cargo.toml").read_text()
    rust_version = re.search(r'^rust-version = "([^"]+)"', cargo, re.M).group(1)
    check(version_tuple(bases["build"].split(":")[1]) >= version_tuple(rust_version),
          f"the build stage's Rust ({bases['build']}) is older than Cargo.toml's rust-version {rust_version}")
    go_version = re.search(r"^go (\S+)", (ROOT / "examples/gateway/go.mod").read_text(), re.M).group(1)
    check(version_tuple(bases["go"].split(":")[1]) >= version_tuple(go_version),
          f"{bases['go']} is older than the gateway's go {go_version}")
    build_runs = " ".join(rest for keyword, rest in stages["build"] if keyword == "RUN")
    check("cargo build --release --lib" in build_runs and "cd examples/gateway" in build_runs
          and "go build" in build_runs, "the build stage builds libember and then the gateway, as `make gateway`")
    # Without the tag the binding links an installed library through pkg-config (bindings/go/link_installed.go),
    # which the build stage does not have.
    check(re.search(r"go build [^&]*-tags ember_in_repo", build_runs) is not None,
          "the build stage's go build must pass -tags ember_in_repo (this checkout's libember.a)")
    check("--bin ember-cli" in build_runs, "the build stage builds ember-cli (the image's `ember-cli pull`)")

    # `docker build .` builds the last stage: it must be the runtime image the docs name, under the tag they and
    # the manifests use (tests/kubernetes/check_manifests.py checks theirs).
    check(list(stages)[-1] == "runtime", f"the last stage is {list(stages)[-1]}: `docker build .` must give runtime")
    crate_version = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    image = f"ember-gateway:{crate_version}"
    check(f"docker build -t {image} ." in dockerfile, f"the Dockerfile's header does not build {image}")
    deploy_doc = (ROOT / "docs" / "deploy.md").read_text()
    check(f"docker build -t {image} ." in deploy_doc, f"docs/deploy.md does not build {image} with `docker build .`")
    for tag in re.findall(r"docker build -t (\S+)", deploy_doc + dockerfile):
        check(tag.startswith(image), f"`docker build -t {tag}`: the image is {image} (or a tag built on it)")

    # The runtime: a non-root user, the gateway's flags, one port, the health check.
    flags = set(re.findall(r'flag\.\w*Var\(&[\w.]+, "([\w-]+)"', (ROOT / "examples/gateway/main.go").read_text()))
    check("listen" in flags and "health-probe" in flags, "the gateway's flags were not found in main.go")
    default_model = re.search(r'FILE="(SmolLM2[^"]+)"', (ROOT / "scripts/fetch-model.sh").read_text()).group(1)
    for name in ("runtime", "bundled"):
        body = dict((k, r) for k, r in stages[name])  # the last of each instruction wins, as in Docker
        user = body.get("USER", "root")
        check(user not in ("root", "0") and not user.startswith("0:"), f"{name}: runs as root")
        expose = body.get("EXPOSE", "")
        check(expose.isdigit(), f"{name}: EXPOSE one port")
        command = shlex.split(body.get("CMD", "").replace("[", "").replace("]", "").replace(",", " "))
        healthcheck = body.get("HEALTHCHECK", "")
        for arguments in (command, shlex.split(healthcheck.replace("[", "").replace("]", "").replace(",", " "))):
            for argument in arguments:
                if argument.startswith("--") and argument[2:] not in ("interval", "timeout", "start-period") \
                        and not re.match(r"--(interval|timeout|start-period|retries)=", argument):
                    check(argument[2:] in flags, f"{name}: ember-gateway has no flag {argument}")
        listen = command[command.index("--listen") + 1] if "--listen" in command else ""
        check(listen == f"0.0.0.0:{expose}", f"{name}: --listen {listen!r} is not 0.0.0.0:{expose}")
        model = command[command.index("--model") + 1] if "--model" in command else ""
        check(model == f"/models/{default_model}", f"{name}: --model {model!r} is not /models/{default_model}")
        check("--health-probe" in healthcheck and f"http://127.0.0.1:{expose}/health" in healthcheck,
              f"{name}: HEALTHCHECK does not probe /health on port {expose}")
        check(body.get("ENTRYPOINT", "").startswith('["/usr/local/bin/ember-gateway"'),
              f"{name}: the entry point is not the gateway")
        # The hub client: ember-cli in the image (Kubernetes' init container runs `ember-cli pull`), and the
        # Hugging Face cache under /models, the model volume, whose directory the user owns.
        copies = [shlex.split(rest) for keyword, rest in stages[name] if keyword == "COPY"]
        check(any(c[-1] == "/usr/local/bin/ember-cli" for c in copies), f"{name}: no /usr/local/bin/ember-cli")
        environment = dict(item.split("=", 1) for keyword, rest in stages[name] if keyword == "ENV"
                           for item in shlex.split(rest) if "=" in item)
        check(environment.get("HF_HOME", "").startswith("/models/"),
              f"{name}: HF_HOME {environment.get('HF_HOME')!r} is not on the model volume /models")
        runs = " ".join(rest for keyword, rest in stages[name] if keyword == "RUN")
        check(f"chown {user} /models" in runs, f"{name}: /models is not owned by the user {user} (a new volume there "
              "takes its owner, and `ember-cli pull` writes to it)")

    for failure in failures:
        print(f"Dockerfile: {failure}", file=sys.stderr)
    if not failures:
        print(f"Dockerfile: {len(stages)} stages ok ({', '.join(stages)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
