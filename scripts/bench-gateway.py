#!/usr/bin/env python3
"""Gateway throughput: requests/s and generated tokens/s with 8 and 32 concurrent clients, and the same load
driven directly through the engine in the same run, so that the difference is what HTTP and JSON cost.

    scripts/bench-gateway.py [--clients 8,32] [--requests-per-client 2] [--max-tokens 32] [--threads 2]
                             [--skip-binding] [--skip-rust] [--json target/bench-gateway.json]
    scripts/bench-gateway.py --api-overhead ROUNDS [--clients 4] [--requests-per-client 2] [--max-tokens 64]
        (instead: the gateway's CPU per streamed token of the Responses and Messages APIs against chat's)

(`make go-bench` builds what it needs and runs it.) Three measurements, one after the other:

1. gateway: examples/gateway (EMBER_GATEWAY, default target/go/ember-gateway) on a free loopback port; each client
   is a thread with one keep-alive connection sending non-streaming chat requests back to back (a short message,
   `max_tokens` generated tokens with `ignore_eos`), `--requests-per-client` each;
2. binding: the same load through the Go binding without HTTP (`go test -bench ConcurrentChat` in bindings/go;
   Go runs each benchmark once with one request per client before the measured run);
3. rust: the same load driven directly from Rust (`cargo bench --bench chat_load`: a thread per client, each
   request through the protocol layer as `engine_submit` takes it), nothing in between.

Rates are wall-clock over a whole load (prefill included). The machine's load average is printed beside them:
on a shared 2-core machine, other work lowers every figure. Environment: EMBER_MODEL, CARGO_TARGET_DIR.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TARGET = os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR", "target"))
MODEL = os.path.join(ROOT, os.environ.get("EMBER_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
# The request of bindings/go/bench_test.go's benchRequest, with max_tokens from --max-tokens.
MESSAGE = "Write a short poem about the sea."


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="8,32", help="comma-separated concurrency levels")
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2, help="engine CPU threads")
    p.add_argument("--gateway", default=os.environ.get("EMBER_GATEWAY", os.path.join(TARGET, "go", "ember-gateway")))
    p.add_argument("--skip-binding", action="store_true")
    p.add_argument("--skip-rust", action="store_true")
    p.add_argument("--json", default=os.path.join(TARGET, "bench-gateway.json"))
    p.add_argument("--api-overhead", type=int, metavar="ROUNDS", default=0,
                   help="instead: gateway CPU per streamed token of each API against chat's, ROUNDS alternated rounds")
    args = p.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    return args


def load_average():
    return os.getloadavg()[0]


def start_gateway(args):
    command = [os.path.join(ROOT, args.gateway), "--listen", "127.0.0.1:0", "--threads", str(args.threads),
               "--model", MODEL]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = process.stdout.readline()
    if "listening on http://" not in line:
        process.kill()
        sys.exit(f"the gateway did not start: {line!r}")
    host, port = line.split("listening on http://", 1)[1].strip().rsplit(":", 1)
    return process, host, int(port)


def gateway_load(host, port, clients, requests_per_client, max_tokens):
    """Closed loop: every client sends its next request when the last one is answered."""
    body = json.dumps({"messages": [{"role": "user", "content": MESSAGE}], "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True})

    def client(_):
        connection = http.client.HTTPConnection(host, port, timeout=600)
        tokens = 0
        for _ in range(requests_per_client):
            connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"status {response.status}: {answer[:200]!r}")
            tokens += json.loads(answer)["usage"]["completion_tokens"]
        connection.close()
        return tokens

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        tokens = sum(pool.map(client, range(clients)))
    seconds = time.monotonic() - start
    requests = clients * requests_per_client
    return {"clients": clients, "requests": requests, "tokens": tokens, "seconds": seconds,
            "requests_per_s": requests / seconds, "tokens_per_s": tokens / seconds}


def run_gateway(args):
    process, host, port = start_gateway(args)
    try:
        gateway_load(host, port, 1, 1, 4)  # warm-up: first-touch of the model's pages
        results = []
        for clients in args.clients:
            load = load_average()
            result = gateway_load(host, port, clients, args.requests_per_client, args.max_tokens)
            result["load_average"] = load
            results.append(result)
        return results
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)


def run_binding(args):
    """bindings/go's BenchmarkConcurrentChat at 8 and 32 clients (its levels are fixed in bench_test.go)."""
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="1",
               CGO_LDFLAGS=os.environ.get("CGO_LDFLAGS", "-L" + os.path.join(TARGET, "release")),
               GOFLAGS=os.environ.get("GOFLAGS", "-tags=ember_in_repo"))  # this checkout's library
    env["EMBER_MODEL"] = MODEL
    load = load_average()
    output = subprocess.run(
        ["go", "test", "-run", "^$", "-bench", "ConcurrentChat", "-benchtime", f"{args.requests_per_client}x", "."],
        cwd=os.path.join(ROOT, "bindings", "go"), env=env, capture_output=True, text=True, check=True).stdout
    results = []
    pattern = re.compile(r"clients=(\d+)\S*\s+\d+\s+\d+ ns/op\s+([\d.]+) requests/s\s+([\d.]+) tokens/s")
    for match in pattern.finditer(output):
        results.append({"clients": int(match[1]), "requests_per_s": float(match[2]), "tokens_per_s": float(match[3]),
                        "load_average": load})
    if not results:
        sys.exit("no benchmark lines in the go test output:\n" + output)
    return results


def run_rust(args):
    """benches/chat_load.rs: the gateway's load without HTTP and without cgo."""
    # Built first, so that compiling does not run inside the measurement's load average.
    subprocess.run(["cargo", "bench", "--bench", "chat_load", "--no-run"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        load = load_average()
        subprocess.run(["cargo", "bench", "--bench", "chat_load", "--", "--clients",
                        ",".join(str(c) for c in args.clients), "--requests-per-client", str(args.requests_per_client),
                        "--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--json", out.name],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        doc = json.load(open(out.name))
    return [dict(r, load_average=load) for r in doc["runs"]]


# --api-overhead: the same streamed request in each API's shape (ember's `ignore_eos` makes every one generate
# exactly max_tokens tokens), and the route it goes to.
def api_requests(max_tokens):
    message = [{"role": "user", "content": MESSAGE}]
    return {
        "chat": ("/v1/chat/completions", {"messages": message, "max_tokens": max_tokens, "temperature": 0,
                                          "ignore_eos": True, "stream": True}),
        "responses": ("/v1/responses", {"input": MESSAGE, "max_output_tokens": max_tokens, "temperature": 0,
                                        "ignore_eos": True, "stream": True}),
        "messages": ("/v1/messages", {"model": "m", "messages": message, "max_tokens": max_tokens,
                                      "temperature": 0, "ignore_eos": True, "stream": True}),
    }


def process_cpu_seconds(pid):
    """User plus system CPU time of a process, from /proc (clock ticks: 10 ms on Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def streamed_load(host, port, path, body, clients, requests_per_client):
    """Closed loop of streamed requests, each read to its end; returns how many succeeded."""
    payload = json.dumps(body)

    def client(_):
        connection = http.client.HTTPConnection(host, port, timeout=600)
        for _ in range(requests_per_client):
            connection.request("POST", path, payload, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: status {response.status}: {answer[:200]!r}")
        connection.close()
        return requests_per_client

    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        return sum(pool.map(client, range(clients)))


def run_api_overhead(args):
    """Each API's gateway CPU per streamed token against chat's, in alternated rounds (the order rotates, so no
    API always runs first); the ratio of medians is the overhead. The CPU is the whole gateway process's: the
    engine runs in it, so the ratio includes the model's work, which is the same for every API."""
    process, host, port = start_gateway(args)
    requests = api_requests(args.max_tokens)
    clients = args.clients[0]
    # One request of each first (it also warms the prefix cache alike for all); an API the gateway refuses is
    # left out, said so.
    apis = []
    for api, (path, body) in requests.items():
        try:
            streamed_load(host, port, path, body, 1, 1)
            apis.append(api)
        except RuntimeError as e:
            print(f"warning: {api} left out: {e}", file=sys.stderr)
    per_token = {api: [] for api in apis}
    for round_index in range(args.api_overhead):
        order = apis[round_index % len(apis):] + apis[:round_index % len(apis)]
        for api in order:
            path, body = requests[api]
            before = process_cpu_seconds(process.pid)
            n = streamed_load(host, port, path, body, clients, args.requests_per_client)
            per_token[api].append((process_cpu_seconds(process.pid) - before) / (n * args.max_tokens))
    process.send_signal(signal.SIGTERM)
    process.wait()
    median = {api: sorted(v)[len(v) // 2] for api, v in per_token.items()}
    print(f"gateway CPU per streamed token, {clients} clients x {args.requests_per_client} requests x "
          f"{args.max_tokens} tokens, {args.api_overhead} rounds, load average {load_average():.2f}")
    for api in apis:
        print(f"{api:<10} {median[api] * 1e6:8.1f} us/token   {median[api] / median['chat']:.3f} of chat's")
    return {"clients": clients, "rounds": args.api_overhead, "cpu_seconds_per_token": per_token,
            "median_ratio_to_chat": {api: median[api] / median["chat"] for api in apis}}


def main():
    args = parse_args()
    if args.api_overhead:
        report = run_api_overhead(args)
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
        return
    report = {"max_tokens": args.max_tokens, "requests_per_client": args.requests_per_client,
              "threads": args.threads, "gateway": run_gateway(args)}
    if not args.skip_binding:
        report["binding"] = run_binding(args)
    if not args.skip_rust:
        report["rust"] = run_rust(args)

    print(f"non-streaming chat, {args.max_tokens} generated tokens per request (ignore_eos), "
          f"{args.requests_per_client} requests per client, {args.threads} engine threads")
    print(f"{'path':<8} {'clients':>7} {'requests/s':>10} {'tokens/s':>9} {'load avg':>8}")
    for path in ("gateway", "binding", "rust"):
        for r in report.get(path, []):
            print(f"{path:<8} {r['clients']:>7} {r['requests_per_s']:>10.2f} {r['tokens_per_s']:>9.1f} "
                  f"{r['load_average']:>8.2f}")
    for path in ("gateway", "binding"):
        for r in report.get(path, []):
            rust = next((x for x in report.get("rust", []) if x["clients"] == r["clients"]), None)
            if rust:
                print(f"{path} / rust at {r['clients']} clients: {r['tokens_per_s'] / rust['tokens_per_s']:.3f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
