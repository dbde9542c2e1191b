#!/usr/bin/env python3
"""Validates deploy/kubernetes/ offline (make lint).

- The core resources (Deployment, Service) against Kubernetes' own OpenAPI schemas, strictly (unknown fields are
  errors), for the oldest and newest versions checked, with `kubernetes-validate` (PyPI), which carries the schemas.
- The Gateway API resources (InferencePool of the Inference Extension, HTTPRoute) have no schema in any registry
  this project reaches: they are checked against the rules of their v1 API reference that these manifests use
  (required fields, enumerations, ranges, no unknown keys).
- Then what ties the files together and to the rest of the repository: the pool and the Service select the
  Deployment's pods, the pool's port is the container's, the route sends to the pool, every gateway flag exists,
  the probes ask /health, the grace period covers the drain, the user is the image's.
- The model's way in: every container runs the image docs/deploy.md builds (ember-gateway:<crate version>); with
  `--model $(EMBER_MODEL_NAME)`, one init container runs `ember-cli pull $(EMBER_MODEL_NAME)` with the gateway's
  EMBER_MODEL_NAME and HF_HOME, on a per-pod volume it can write and the gateway mounts read-only, and the gateway
  has HF_HUB_OFFLINE=1; otherwise --model is a file on a mounted volume.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Dict, List

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
failures: List[str] = []


def check(condition: bool, message: str) -> None:
    if not condition:
        failures.append(message)


def unknown_keys(where: str, value: Dict[str, Any], allowed: set) -> None:
    extra = set(value) - allowed
    check(not extra, f"{where}: unknown fields {sorted(extra)}")


def port_number(value: Any) -> bool:
    return isinstance(value, int) and 1 <= value <= 65535


def check_inference_pool(pool: Dict[str, Any]) -> None:
    where = f"InferencePool {pool['metadata'].get('name')}"
    spec = pool.get("spec", {})
    unknown_keys(where, spec, {"selector", "targetPorts", "endpointPickerRef"})
    labels = spec.get("selector", {}).get("matchLabels", {})
    check(isinstance(labels, dict) and labels, f"{where}: spec.selector.matchLabels is required")
    ports = spec.get("targetPorts", [])
    check(isinstance(ports, list) and 1 <= len(ports) <= 8, f"{where}: spec.targetPorts needs 1 to 8 ports")
    for port in ports:
        unknown_keys(f"{where} targetPorts", port, {"number"})
        check(port_number(port.get("number")), f"{where}: targetPorts[].number must be 1..65535")
    picker = spec.get("endpointPickerRef", {})
    unknown_keys(f"{where} endpointPickerRef", picker, {"group", "kind", "name", "port", "failureMode"})
    check(bool(picker.get("name")), f"{where}: endpointPickerRef.name is required")
    check(port_number(picker.get("port", {}).get("number")), f"{where}: endpointPickerRef.port.number")
    check(picker.get("failureMode", "FailClose") in ("FailOpen", "FailClose"), f"{where}: failureMode")


def check_http_route(route: Dict[str, Any]) -> None:
    where = f"HTTPRoute {route['metadata'].get('name')}"
    spec = route.get("spec", {})
    unknown_keys(where, spec, {"parentRefs", "hostnames", "rules"})
    check(bool(spec.get("parentRefs")) and all(p.get("name") for p in spec["parentRefs"]),
          f"{where}: parentRefs need names")
    for rule in spec.get("rules", []):
        unknown_keys(f"{where} rule", rule, {"name", "matches", "filters", "backendRefs", "timeouts"})
        for match in rule.get("matches", []):
            path = match.get("path", {})
            check(path.get("type", "PathPrefix") in ("Exact", "PathPrefix", "RegularExpression"),
                  f"{where}: path.type")
        for duration in rule.get("timeouts", {}).values():
            check(bool(re.fullmatch(r"(\d+(h|m|s|ms)){1,4}", str(duration))), f"{where}: timeout {duration!r}")
        check(bool(rule.get("backendRefs")), f"{where}: a rule without backendRefs")


def flags_of_the_gateway() -> set:
    main_go = (ROOT / "examples" / "gateway" / "main.go").read_text()
    return set(re.findall(r'flag\.\w*Var\(&[\w.]+, "([\w-]+)"', main_go))


def main() -> int:
    resources: List[Dict[str, Any]] = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                document["__file"] = path.name
                resources.append(document)
    by_kind: Dict[str, List[Dict[str, Any]]] = {}
    for resource in resources:
        by_kind.setdefault(resource["kind"], []).append(resource)

    for resource in resources:
        body = {k: v for k, v in resource.items() if k != "__file"}
        if resource["kind"] == "InferencePool":
            check(resource["apiVersion"] == "inference.networking.k8s.io/v1", "InferencePool: apiVersion")
            check_inference_pool(body)
            continue
        if resource["kind"] == "HTTPRoute":
            check(resource["apiVersion"] == "gateway.networking.k8s.io/v1", "HTTPRoute: apiVersion")
            check_http_route(body)
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(body, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                failures.append(f"{resource['__file']}: {resource['kind']} against Kubernetes {version}: "
                                f"{error.message} at {'.'.join(map(str, error.path))}")
            except kubernetes_validate.SchemaNotFoundError as error:
                failures.append(f"{resource['__file']}: no schema for {resource['kind']}: {error}")

    for kind in ("Deployment", "Service", "InferencePool", "HTTPRoute"):
        check(len(by_kind.get(kind, [])) == 1, f"expected one {kind}")
    if failures:
        return report()
    deployment, service = by_kind["Deployment"][0], by_kind["Service"][0]
    pool, route = by_kind["InferencePool"][0], by_kind["HTTPRoute"][0]
    pod = deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]

    def selects(selector: Dict[str, str]) -> bool:
        return all(pod_labels.get(k) == v for k, v in selector.items())

    check(selects(pool["spec"]["selector"]["matchLabels"]), "the InferencePool does not select the gateway's pods")
    check(selects(service["spec"]["selector"]), "the Service does not select the gateway's pods")
    container_ports = {p["containerPort"] for p in container["ports"]}
    check({p["number"] for p in pool["spec"]["targetPorts"]} <= container_ports, "the pool's port is not the pod's")
    backends = [b for rule in route["spec"]["rules"] for b in rule["backendRefs"]]
    check(any(b.get("kind") == "InferencePool" and b.get("name") == pool["metadata"]["name"] for b in backends),
          "the HTTPRoute does not send to the InferencePool")

    args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in container["args"])
    unknown = set(args) - flags_of_the_gateway()
    check(not unknown, f"ember-gateway has no flags {sorted(unknown)}")
    listen_port = int(args.get("listen", ":0").rsplit(":", 1)[1])
    check(listen_port in container_ports, f"--listen {args.get('listen')} is not the container's port")
    check(args.get("metrics-names") != "vllm" or pod_labels.get("llm-d.ai/engine-type", "vllm") == "vllm",
          "--metrics-names vllm needs the picker's vllm mapping (label llm-d.ai/engine-type: vllm, or none)")
    cpu = container["resources"]["requests"]["cpu"]
    check(args.get("threads") == str(cpu), f"--threads {args.get('threads')} is not the CPU request {cpu}")
    for probe in ("readinessProbe", "livenessProbe"):
        check(container[probe]["httpGet"]["path"] == "/health", f"{probe} does not ask /health")
    shutdown = int(args.get("shutdown-timeout", "30s").rstrip("s"))
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    check(grace >= pre_stop + shutdown + 5, f"terminationGracePeriodSeconds {grace} < preStop + drain + 5 s")
    liveness = container["livenessProbe"]
    check(liveness["periodSeconds"] * liveness["failureThreshold"] > shutdown,
          "the liveness probe would restart a draining gateway (/health is 503 while it drains)")
    dockerfile = (ROOT / "Dockerfile").read_text()
    user = re.search(r"^USER (\d+)", dockerfile, re.M).group(1)
    check(str(pod["spec"]["securityContext"]["runAsUser"]) == user, f"runAsUser is not the image's user {user}")
    check_model_source(deployment, container, args)
    return report()


def environment(container: Dict[str, Any]) -> Dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def mount_of(container: Dict[str, Any], path: str) -> Dict[str, Any]:
    """The volume mount holding `path`, or {}."""
    return next((m for m in container.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")),
                {})


def check_model_source(deployment: Dict[str, Any], container: Dict[str, Any], args: Dict[str, str]) -> None:
    """The image is the one docs/deploy.md builds; the model is a hub name that an init container pulls into the
    hub cache (HF_HOME) on a per-pod volume and the gateway loads offline, or a file on a mounted volume."""
    pod = deployment["spec"]["template"]["spec"]
    version = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)
    image = f"ember-gateway:{version}"
    deploy_doc = (ROOT / "docs" / "deploy.md").read_text()
    check(f"docker build -t {image} ." in deploy_doc, f"docs/deploy.md does not build the manifests' image {image}")
    for each in pod["containers"] + pod.get("initContainers", []):
        check(each["image"] == image, f"container {each['name']}: image {each['image']} is not {image} "
              "(the tag docs/deploy.md and the Dockerfile build)")
    model = args.get("model", "")
    if model != "$(EMBER_MODEL_NAME)":
        check(bool(mount_of(container, model)), f"--model {model} is not on a mounted volume")
        return
    gateway_env = environment(container)
    inits = pod.get("initContainers", [])
    check(len(inits) == 1, "--model $(EMBER_MODEL_NAME) needs one init container filling the hub cache")
    if len(inits) != 1:
        return
    init = inits[0]
    init_env = environment(init)
    check(init.get("command") == ["/usr/local/bin/ember-cli"] and init.get("args") == ["pull", "$(EMBER_MODEL_NAME)"],
          "the init container must run `/usr/local/bin/ember-cli pull $(EMBER_MODEL_NAME)`")
    name = gateway_env.get("EMBER_MODEL_NAME", "")
    check(re.fullmatch(r"[\w.-]+/[\w.-]+(:[\w.-]+)?", name) is not None,
          f"EMBER_MODEL_NAME {name!r} is not a hub name (org/repo or org/repo:QUANT)")
    check(init_env.get("EMBER_MODEL_NAME") == name, "the init container pulls another model than the gateway serves")
    hf_home = gateway_env.get("HF_HOME", "")
    check(bool(hf_home) and init_env.get("HF_HOME") == hf_home, "HF_HOME differs between the init container and "
          "the gateway (or is unset): the gateway would not find the pulled model")
    check(gateway_env.get("HF_HUB_OFFLINE") == "1", "the gateway needs HF_HUB_OFFLINE=1: it resolves the name from "
          "the cache its init container filled, never on the network")
    check(init_env.get("HF_HUB_OFFLINE", "0") in ("0", ""), "the init container must be online to pull")
    serving, pulling = mount_of(container, hf_home), mount_of(init, hf_home)
    check(bool(serving) and bool(pulling) and serving["name"] == pulling["name"],
          f"HF_HOME {hf_home} is not on one volume mounted in both containers")
    check(not pulling.get("readOnly", False), "the init container's cache volume is read-only: it cannot pull")
    check(serving.get("readOnly", False), "the gateway's cache volume should be read-only: it only reads the model")
    # The replicas must not share one volume that every pod's init container writes (docs/deploy.md, "The model
    # volume"): the cache volume is the pod's own.
    volume = next((v for v in pod.get("volumes", []) if v["name"] == serving.get("name")), {})
    check("emptyDir" in volume or "ephemeral" in volume,
          f"the cache volume {serving.get('name')} is not per pod (emptyDir or ephemeral): "
          f"{deployment['spec'].get('replicas', 1)} replicas' init containers would write one volume")


def report() -> int:
    for failure in failures:
        print(f"deploy/kubernetes: {failure}", file=sys.stderr)
    if not failures:
        print(f"deploy/kubernetes: ok (core resources against Kubernetes {', '.join(KUBERNETES_VERSIONS)}, strict)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
