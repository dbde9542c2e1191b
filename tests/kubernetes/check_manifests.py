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
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    check(any(args.get("model", "").startswith(m + "/") for m in mounts), "--model is not on a mounted volume")
    return report()


def report() -> int:
    for failure in failures:
        print(f"deploy/kubernetes: {failure}", file=sys.stderr)
    if not failures:
        print(f"deploy/kubernetes: ok (core resources against Kubernetes {', '.join(KUBERNETES_VERSIONS)}, strict)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
