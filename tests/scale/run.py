#!/usr/bin/env python3
"""Replicas behind a real load balancer (make test-scale): HAProxy, from Debian's package, in front of three
ember-gateway processes on this machine, driven by the official openai client. Four parts, one report:

1. **Kill and drain.** Mixed streamed and non-streamed chats through HAProxy (least connections) while one
   replica is killed (SIGKILL) and another drained (SIGTERM: it finishes its streams, /health answers 503). Every
   request must complete, or fail with an error that the client sees and a retry fixes; none may hang, and none may
   end early looking complete (a stream without its finish_reason, an empty answer).
2. **Session affinity.** Five-turn conversations, each turn resending the history: the share of prompt tokens
   the replicas found in their prefix caches, with HAProxy hashing a session header (`balance hdr(x-session-id)`)
   against round robin and against one replica alone. Hashing must come within 10 % of one replica.
3. **Three replicas against one**: the same fixed load's throughput. On a 2-core machine three replicas share two
   cores, so this shows the cost of running replicas, not a speed-up.

    python3 tests/scale/run.py --gateway target/go/ember-gateway [--model PATH] [--json OUT]

Exit status 1 when a request was lost silently, hung or failed past its retry, or when hashing misses its target.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import openai

ROOT = Path(__file__).resolve().parents[2]
MODEL_ID = "smol"
#: Longest any one request may take before it counts as hung (a 2-core machine under three replicas' load).
REQUEST_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """One ember-gateway process on a free port."""

    def __init__(self, binary: str, model: str, threads: int) -> None:
        self.process = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--model", model, "--threads", str(threads),
             "--served-model-name", MODEL_ID, "--shutdown-timeout", "60s", "--max-concurrent-requests", "1024"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        match = re.search(r"http://([\d.]+):(\d+)", line)
        if not match:
            self.process.kill()
            raise RuntimeError(f"the gateway did not start: {line!r}")
        self.port = int(match.group(2))
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def wait(self, timeout: float = 90) -> int:
        return self.process.wait(timeout)


class HAProxy:
    """HAProxy in the foreground, balancing `balance` over `servers` with health checks on /health."""

    def __init__(self, servers: List[Gateway], balance: str, workdir: Path) -> None:
        self.port = free_port()
        lines = [
            "global", "    maxconn 2048",
            "defaults", "    mode http", "    timeout connect 2s", "    timeout client 180s",
            "    timeout server 180s", "    timeout queue 60s",
            # A connection refused (a killed replica), a reply-less close and a draining replica's 503 are retried
            # on another server, so a client never sees them; a stream already under way cannot be.
            "    retries 3", "    option redispatch 1", "    retry-on conn-failure empty-response 503",
            "    option http-buffer-request",
            "frontend ember", f"    bind 127.0.0.1:{self.port}", "    default_backend replicas",
            "backend replicas", f"    balance {balance}",
        ]
        if balance.startswith("hdr("):
            lines.append("    hash-type consistent")
        lines += ["    option httpchk GET /health", "    http-check expect status 200",
                  "    default-server inter 250ms fall 1 rise 2"]
        lines += [f"    server r{i} 127.0.0.1:{g.port} check" for i, g in enumerate(servers)]
        config = workdir / f"haproxy-{self.port}.cfg"
        config.write_text("\n".join(lines) + "\n")
        self.process = subprocess.Popen([shutil.which("haproxy") or "/usr/sbin/haproxy", "-f", str(config), "-db"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        wait_healthy(self.url, lambda: self.process.poll() is None)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def wait_healthy(url: str, alive, timeout: float = 30) -> None:
    """Until `url`/health answers 200 (through HAProxy: once a server is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"{url}: the process exited")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url}/health never answered 200")


def client(url: str) -> openai.OpenAI:
    # The driver retries by itself, to count what a retry had to fix.
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=REQUEST_TIMEOUT_S)


@dataclass
class Outcome:
    attempts: int = 0
    errors: List[str] = field(default_factory=list)
    ok: bool = False
    silent_loss: Optional[str] = None
    seconds: float = 0.0


def one_chat(api: openai.OpenAI, prompt: str, max_tokens: int, stream: bool, long: bool = False) -> str:
    """One chat, checked for completeness: a stream must end with its finish_reason, an answer must have one.
    `long`: generate all `max_tokens` (ignore_eos)."""
    messages = [{"role": "user", "content": prompt}]
    extra = {"ignore_eos": True} if long else None
    if stream:
        text, finish = "", None
        for chunk in api.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=max_tokens,
                                                 stream=True, temperature=0, extra_body=extra):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        if finish is None:
            raise SilentLoss(f"a stream ended without a finish_reason after {len(text)} characters")
        return text
    response = api.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=max_tokens, temperature=0,
                                           extra_body=extra)
    if not response.choices or response.choices[0].finish_reason is None:
        raise SilentLoss("an answer without a finish_reason")
    return response.choices[0].message.content or ""


class SilentLoss(Exception):
    """A request that looked complete to the client but was not."""


def with_retries(api: openai.OpenAI, prompt: str, max_tokens: int, stream: bool, long: bool = False,
                 tries: int = 3) -> Outcome:
    outcome = Outcome()
    started = time.monotonic()
    while outcome.attempts < tries and not outcome.ok:
        outcome.attempts += 1
        try:
            one_chat(api, prompt, max_tokens, stream, long)
            outcome.ok = True
        except SilentLoss as loss:
            outcome.silent_loss = str(loss)
            break
        except Exception as error:  # noqa: BLE001 (whatever the client raises is an error it sees: a status, a
            # broken connection or stream; only SilentLoss above is one it does not)
            outcome.errors.append(f"{type(error).__name__}: {str(error)[:120]}")
    outcome.seconds = time.monotonic() - started
    return outcome


def in_flight(gateway: Gateway) -> int:
    with urllib.request.urlopen(gateway.url + "/health", timeout=5) as response:
        return json.load(response)["requests_in_flight"]


def kill_and_drain(binary: str, model: str, workdir: Path) -> Dict:
    replicas = [Gateway(binary, model, threads=1) for _ in range(3)]
    proxy = HAProxy(replicas, "leastconn", workdir)
    api = client(proxy.url)
    total, concurrency = 60, 6
    done = threading.Semaphore(0)
    rng = random.Random(7)
    jobs = [(f"Tell me fact number {i} about the sea.", rng.choice([12, 24, 40]), i % 2 == 0) for i in range(total)]

    def run(job) -> Outcome:
        try:
            return with_retries(api, *job)
        finally:
            done.release()

    with ThreadPoolExecutor(max_workers=concurrency + 2) as pool:
        # Two long streams first, on idle replicas (least connections puts them on two different ones): the kill
        # targets the first one's replica, so that a stream is surely broken mid-way; the drain the second's, so
        # that a stream surely has to be finished by a draining replica.
        victims, hosts = [], []
        for name in ("killed", "drained"):
            victims.append(pool.submit(with_retries, api, f"Tell a long story ({name}).", 1000, True, True))
            deadline = time.monotonic() + 30
            while True:
                busy = [r for r in replicas if r not in hosts and in_flight(r) > 0]
                if busy:
                    hosts.append(busy[0])
                    break
                assert time.monotonic() < deadline, "the long stream never reached a replica"
                time.sleep(0.01)
        futures = [pool.submit(run, job) for job in jobs]
        for _ in range(15):
            done.acquire()
        hosts[0].stop(signal.SIGKILL)  # a crash: its streams break mid-way
        for _ in range(15):
            done.acquire()
        hosts[1].stop(signal.SIGTERM)  # a rolling update: it finishes what it has, takes nothing new
        outcomes = []
        for future in futures + victims:
            try:
                outcomes.append(future.result(timeout=REQUEST_TIMEOUT_S * 3))
            except TimeoutError:
                outcomes.append(Outcome(errors=["hung"]))
    drained_status = hosts[1].wait()
    proxy.stop()
    for replica in replicas:
        replica.stop(signal.SIGKILL)
        replica.wait()
    killed_stream, drained_stream = outcomes[-2], outcomes[-1]
    return {
        "requests": len(outcomes),
        "completed_first_try": sum(o.ok and o.attempts == 1 for o in outcomes),
        "completed_after_retry": sum(o.ok and o.attempts > 1 for o in outcomes),
        "failed_past_retries": sum(not o.ok and not o.silent_loss for o in outcomes),
        "lost_silently": sum(bool(o.silent_loss) for o in outcomes),
        "hung": sum("hung" in o.errors for o in outcomes),
        "errors_seen": sorted({e.split(":")[0] for o in outcomes for e in o.errors}),
        # The killed replica's stream: the client saw the break, and its retry completed elsewhere.
        "killed_stream_seen_and_retried": killed_stream.ok and killed_stream.attempts == 2,
        # The drained replica's stream: finished by that replica, first try.
        "drained_stream_finished": drained_stream.ok and drained_stream.attempts == 1,
        "drained_replica_exit_status": drained_status,
    }


def conversations(url: str, sessions: int, turns: int) -> float:
    """Runs `sessions` conversations of `turns` turns at once; the share of prompt tokens found cached."""
    api = client(url)
    totals = {"prompt": 0, "cached": 0}
    lock = threading.Lock()

    def converse(index: int) -> None:
        messages = [{"role": "system", "content": f"You are assistant number {index}. Answer in one sentence."}]
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Question {turn} of conversation {index}: name a colour."})
            response = api.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=12, temperature=0,
                                                   extra_headers={"x-session-id": f"session-{index}"})
            details = response.usage.prompt_tokens_details
            with lock:
                totals["prompt"] += response.usage.prompt_tokens
                totals["cached"] += (details.cached_tokens or 0) if details else 0
            messages.append({"role": "assistant", "content": response.choices[0].message.content})

    with ThreadPoolExecutor(max_workers=sessions) as pool:
        list(pool.map(converse, range(sessions)))
    return totals["cached"] / totals["prompt"]


def affinity(binary: str, model: str, workdir: Path, sessions: int = 6, turns: int = 5) -> Dict:
    shares = {}
    single = Gateway(binary, model, threads=2)
    shares["one replica"] = conversations(single.url, sessions, turns)
    single.stop()
    single.wait()
    for name, balance in (("round robin", "roundrobin"), ("session hash", "hdr(x-session-id)")):
        replicas = [Gateway(binary, model, threads=1) for _ in range(3)]  # empty prefix caches each time
        proxy = HAProxy(replicas, balance, workdir)
        shares[name] = conversations(proxy.url, sessions, turns)
        proxy.stop()
        for replica in replicas:
            replica.stop()
            replica.wait()
    return {"sessions": sessions, "turns": turns, "cached_prompt_share": shares,
            "hash_within_10_percent": shares["session hash"] >= 0.9 * shares["one replica"]}


def throughput(binary: str, model: str, workdir: Path, requests: int = 24, concurrency: int = 8) -> Dict:
    def load(url: str) -> Dict:
        api = client(url)
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda i: api.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": f"Write line {i} of a poem."}],
                max_tokens=32, temperature=0, extra_body={"ignore_eos": True}), range(requests)))
        seconds = time.monotonic() - started
        tokens = sum(r.usage.completion_tokens for r in results)
        return {"requests_per_s": requests / seconds, "tokens_per_s": tokens / seconds}

    single = Gateway(binary, model, threads=2)
    one = load(single.url)
    single.stop()
    single.wait()
    replicas = [Gateway(binary, model, threads=1) for _ in range(3)]
    proxy = HAProxy(replicas, "leastconn", workdir)
    three = load(proxy.url)
    proxy.stop()
    for replica in replicas:
        replica.stop()
        replica.wait()
    return {"one replica (2 threads)": one, "three replicas (1 thread each) behind HAProxy": three,
            "ratio_tokens_per_s": three["tokens_per_s"] / one["tokens_per_s"], "cores": os.cpu_count()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gateway", default=str(ROOT / "target" / "go" / "ember-gateway"))
    parser.add_argument("--model", default=os.environ.get("EMBER_MODEL",
                                                          str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")))
    parser.add_argument("--json", help="also write the report there")
    args = parser.parse_args()
    if not shutil.which("haproxy") and not Path("/usr/sbin/haproxy").exists():
        print("error: haproxy is missing: apt-get install haproxy (scripts/install-test-tools.sh does)",
              file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        report = {"kill_and_drain": kill_and_drain(args.gateway, args.model, workdir),
                  "session_affinity": affinity(args.gateway, args.model, workdir),
                  "throughput": throughput(args.gateway, args.model, workdir)}
    k, a, t = report["kill_and_drain"], report["session_affinity"], report["throughput"]
    print(f"kill and drain: {k['requests']} requests; {k['completed_first_try']} first try, "
          f"{k['completed_after_retry']} after a retry, {k['failed_past_retries']} failed past 3 tries, "
          f"{k['lost_silently']} lost silently, {k['hung']} hung; errors seen: {', '.join(k['errors_seen']) or 'none'};"
          f" the killed replica's stream {'broke, was seen and retried' if k['killed_stream_seen_and_retried'] else 'was NOT seen broken and retried'};"
          f" the drained replica {'finished its stream' if k['drained_stream_finished'] else 'did NOT finish its stream'}"
          f" and exited with {k['drained_replica_exit_status']}")
    shares = a["cached_prompt_share"]
    print(f"session affinity ({a['sessions']} conversations x {a['turns']} turns), cached prompt tokens: "
          + ", ".join(f"{name} {share:.1%}" for name, share in shares.items()))
    print(f"throughput, {t['cores']} cores: one replica {t['one replica (2 threads)']['tokens_per_s']:.0f} tokens/s, "
          f"three behind HAProxy {t['three replicas (1 thread each) behind HAProxy']['tokens_per_s']:.0f} tokens/s "
          f"({t['ratio_tokens_per_s']:.2f}x; the three share the same {t['cores']} cores, so this shows what running "
          "replicas costs, not a speed-up)")
    print(json.dumps(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    failed = (k["lost_silently"] or k["hung"] or k["failed_past_retries"] or k["drained_replica_exit_status"] != 0
              or not k["killed_stream_seen_and_retried"] or not k["drained_stream_finished"])
    if not a["hash_within_10_percent"]:
        print("FAIL: session hashing is not within 10 % of one replica's cached share", file=sys.stderr)
    if failed:
        print("FAIL: a request was lost, hung or failed past its retries, the kill or the drain did not behave, or "
              "the drained replica did not exit cleanly", file=sys.stderr)
    return 1 if failed or not a["hash_within_10_percent"] else 0


if __name__ == "__main__":
    sys.exit(main())
