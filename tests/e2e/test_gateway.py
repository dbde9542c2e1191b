#!/usr/bin/env python3
"""End-to-end test of examples/gateway with the official OpenAI Python client (`pip install openai`).

Starts the built gateway on free loopback ports (--listen 127.0.0.1:0; it prints its address) over the real model,
and checks what an OpenAI client sees: chat and completions, streaming with usage, the per-request `metrics`, the
llama.cpp `timings` and their double gate, metrics headers (X-Ember-*, Server-Timing), log probabilities, structured
outputs (a pydantic model through `parse`), OpenAI errors, 32 concurrent clients, a client that disconnects
mid-stream, an API key (the right one served, a wrong one `AuthenticationError`, each request in the access log),
and a graceful SIGTERM.

    EMBER_GATEWAY=target/go/ember-gateway python3 tests/e2e/test_gateway.py   (`make go-test` builds it and runs this)

Environment: EMBER_GATEWAY (the binary; default target/go/ember-gateway), EMBER_MODEL (default
models/SmolLM2-135M-Instruct.Q4_1.gguf), both relative to the repository root. Requests are greedy (`temperature=0`:
ember's default is OpenAI's 1) and short.
"""

import concurrent.futures
import json
import math
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
import typing
import unittest
import urllib.request

import openai
import pydantic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GATEWAY = os.path.join(ROOT, os.environ.get("EMBER_GATEWAY", "target/go/ember-gateway"))
MODEL = os.path.join(ROOT, os.environ.get("EMBER_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
# The gateway names the model after its file, without the extension.
MODEL_ID = os.path.splitext(os.path.basename(MODEL))[0]
# llama.cpp's real chat templates (scripts/llamacpp/fetch-templates.sh; `make go-test` fetches them).
TEMPLATES = os.path.join(ROOT, os.environ.get("EMBER_LLAMACPP_TEMPLATES", ".cache/llamacpp/templates"))
# Phi-4-mini's template (not among llama.cpp's; tests/fixtures/README.md).
PHI4_MINI_TEMPLATE = os.path.join(ROOT, "tests/fixtures/phi4_mini_template.jinja")
FIVE_METRICS = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second")
# llama-server's `timings` fields (docs/per_request_metrics.md, "llama.cpp `timings`").
TIMINGS = ("cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
           "predicted_ms", "predicted_per_token_ms", "predicted_per_second")
# Bound on waiting for the gateway to do something (start, drop a request); never a measured duration.
PATIENCE_S = 60


class Gateway:
    """One gateway process, with its own engine."""

    def __init__(self, *flags):
        if not os.path.exists(GATEWAY):
            raise RuntimeError(f"no gateway binary at {GATEWAY}: build it with `make gateway` or set EMBER_GATEWAY")
        if not os.path.exists(MODEL):
            raise RuntimeError(f"no model at {MODEL}: run scripts/fetch-model.sh or set EMBER_MODEL")
        self.log = tempfile.TemporaryFile()
        self.terminated = False
        command = [GATEWAY, "--listen", "127.0.0.1:0", "--threads", "2", "--model", MODEL, *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url = self._read_address()
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=PATIENCE_S)

    def _read_address(self):
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=PATIENCE_S):
            self.process.kill()
            raise RuntimeError("the gateway did not start:\n" + self.stderr())
        line = self.process.stdout.readline()
        if "listening on " not in line:
            self.process.wait()
            raise RuntimeError(f"the gateway did not start ({line!r}):\n" + self.stderr())
        return line.split("listening on ", 1)[1].strip()

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def get_json(self, path):
        with urllib.request.urlopen(self.url + path, timeout=PATIENCE_S) as response:
            return json.load(response)

    def post_json(self, path, body):
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
            return json.load(response)

    def metrics_text(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=PATIENCE_S) as response:
            return response.read().decode()

    def counter(self, endpoint, code):
        """The value of ember_gateway_requests_total{model_name, endpoint, code}, 0 when not yet reported."""
        prefix = f'ember_gateway_requests_total{{model_name="{MODEL_ID}",endpoint="{endpoint}",code="{code}"}} '
        for line in self.metrics_text().splitlines():
            if line.startswith(prefix):
                return int(line[len(prefix):])
        return 0

    def terminate(self):
        """Sends SIGTERM once: a second one during the drain would kill the gateway at once."""
        if not self.terminated:
            self.terminated = True
            self.process.send_signal(signal.SIGTERM)

    def stop(self):
        """SIGTERM, then the exit status."""
        self.terminate()
        try:
            return self.process.wait(timeout=PATIENCE_S)
        finally:
            self.process.stdout.close()


def wait_until(predicate, what):
    deadline = time.monotonic() + PATIENCE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def chat_messages(text):
    return [{"role": "user", "content": text}]


# Two gateways for the whole module: one with per-request metrics and metrics headers, one without.
with_metrics = None
plain = None


def setUpModule():
    global with_metrics, plain
    with_metrics = Gateway("--enable-per-request-metrics", "--metrics-headers", "--metrics-names", "vllm")
    plain = Gateway()


def tearDownModule():
    for gateway in (with_metrics, plain):
        if gateway is not None:
            status = gateway.stop()
            assert status == 0, f"gateway exited with {status}:\n{gateway.stderr()}"
            gateway.log.close()


class GatewayTest(unittest.TestCase):
    def assert_consistent_metrics(self, metrics, completion_tokens):
        """The five metrics are present and agree with each other (docs/per_request_metrics.md)."""
        self.assertIsInstance(metrics, dict)
        for field in FIVE_METRICS:
            self.assertIsInstance(metrics.get(field), float, f"{field} in {metrics}")
        ttft, gen = metrics["time_to_first_token_ms"], metrics["generation_time_ms"]
        self.assertGreaterEqual(metrics["queue_time_ms"], 0)
        self.assertGreaterEqual(ttft, 0)
        self.assertGreaterEqual(gen, 0)
        n = completion_tokens
        self.assertGreaterEqual(n, 2, "mean_itl_ms needs two tokens")
        self.assertTrue(math.isclose(metrics["mean_itl_ms"], gen / (n - 1), rel_tol=1e-6), metrics)
        self.assertTrue(math.isclose(metrics["tokens_per_second"], n / ((ttft + gen) / 1000), rel_tol=1e-6), metrics)

    def assert_timings(self, timings, metrics, usage):
        """llama.cpp's `timings`: every field, counts that add up to `usage`, and the `metrics` times."""
        self.assertEqual(sorted(timings), sorted(TIMINGS), timings)
        self.assertEqual(timings["cache_n"] + timings["prompt_n"], usage["prompt_tokens"])
        self.assertEqual(timings["cache_n"], usage["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(timings["predicted_n"], usage["completion_tokens"])
        self.assertEqual(timings["prompt_ms"], metrics["time_to_first_token_ms"])
        self.assertEqual(timings["predicted_ms"], metrics["generation_time_ms"])
        self.assertEqual(timings["predicted_per_token_ms"], metrics["mean_itl_ms"])
        self.assertTrue(math.isclose(timings["prompt_per_second"] * timings["prompt_ms"],
                                     timings["prompt_n"] * 1000, rel_tol=1e-6), timings)
        self.assertTrue(math.isclose(timings["predicted_per_second"], 1000 / metrics["mean_itl_ms"], rel_tol=1e-6))

    def test_chat(self):
        response = plain.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("What is the capital of France?"), max_tokens=8)
        self.assertEqual(response.object, "chat.completion")
        self.assertEqual(len(response.choices), 1)
        self.assertTrue(response.choices[0].message.content)
        self.assertIn(response.choices[0].finish_reason, ("stop", "length"))
        self.assertTrue(0 < response.usage.completion_tokens <= 8)
        self.assertNotIn("metrics", response.model_extra)

    def test_chat_stream_with_usage_and_metrics(self):
        stream = with_metrics.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Name a color."), max_tokens=6, stream=True,
            stream_options={"include_usage": True}, extra_body={"include_metrics": True, "ignore_eos": True})
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertTrue(text)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finish, ["length"])
        last = chunks[-1]
        self.assertEqual(last.choices, [])
        self.assertEqual(last.usage.completion_tokens, 6)
        self.assert_consistent_metrics(last.model_extra.get("metrics"), last.usage.completion_tokens)
        self.assert_timings(last.model_extra.get("timings"), last.model_extra["metrics"], last.usage.model_dump())
        # Only the usage chunk carries metrics and timings.
        self.assertTrue(all("metrics" not in c.model_extra and "timings" not in c.model_extra for c in chunks[:-1]))

    def test_completions(self):
        response = plain.client.completions.create(
            model=MODEL_ID, temperature=0, prompt="The capital of France is", max_tokens=5)
        self.assertEqual(response.object, "text_completion")
        self.assertTrue(response.choices[0].text)
        self.assertTrue(0 < response.usage.completion_tokens <= 5)

    def test_completions_stream(self):
        stream = plain.client.completions.create(
            model=MODEL_ID, temperature=0, prompt="One, two, three,", max_tokens=4, stream=True)
        text = "".join(c.choices[0].text for c in stream if c.choices)
        self.assertTrue(text)

    def test_metrics_text_parses_with_the_official_parser(self):
        """/metrics (the gateway's counters, then engine_metrics_text) in prometheus_client's own parser."""
        from prometheus_client.parser import text_string_to_metric_families

        plain.client.completions.create(model=MODEL_ID, temperature=0, prompt="One, two,", max_tokens=3,
                                        extra_body={"ignore_eos": True})
        families = {f.name: f for f in text_string_to_metric_families(plain.metrics_text())}
        for name, kind in (("ember_gateway_requests", "counter"), ("ember_num_requests_running", "gauge"),
                           ("ember_kv_cache_usage_perc", "gauge"), ("ember_model_load_time_seconds", "gauge"),
                           ("ember_request_success", "counter"),
                           ("ember_prompt_tokens", "counter"), ("ember_generation_tokens", "counter"),
                           ("ember_time_to_first_token_seconds", "histogram"),
                           ("ember_inter_token_latency_seconds", "histogram"),
                           ("ember_request_queue_time_seconds", "histogram"),
                           ("ember_e2e_request_latency_seconds", "histogram")):
            self.assertIn(name, families)
            self.assertEqual(families[name].type, kind, name)
        model = {"model_name": MODEL_ID}
        length = [s.value for s in families["ember_request_success"].samples
                  if s.name == "ember_request_success_total"
                  and s.labels == {**model, "finished_reason": "length"}]
        self.assertEqual(len(length), 1)
        self.assertGreaterEqual(length[0], 1)
        itl = {s.name: s.value for s in families["ember_inter_token_latency_seconds"].samples if s.labels == model}
        self.assertGreaterEqual(itl["ember_inter_token_latency_seconds_count"], 2)
        for family in families.values():
            for sample in family.samples:
                self.assertEqual(sample.labels.get("model_name"), MODEL_ID, sample)
        self.assertFalse([name for name in families if name.startswith("vllm:")], "vLLM's names unasked")

    def test_the_endpoint_pickers_metrics_under_vllms_names(self):
        """--metrics-names vllm: the metrics the Kubernetes inference gateway's endpoint picker reads by default,
        with their types and labels, and the values of ember's own names (docs/deploy.md)."""
        from prometheus_client.parser import text_string_to_metric_families

        families = {f.name: f for f in text_string_to_metric_families(with_metrics.metrics_text())}
        model = {"model_name": MODEL_ID}

        def value(name, labels=None):
            family = families[name]
            samples = [s for s in family.samples if s.labels == (labels or model)]
            self.assertEqual(len(samples), 1, (name, family.samples))
            return samples[0].value

        expected = [("vllm:num_requests_waiting", "gauge"), ("vllm:num_requests_running", "gauge"),
                    ("vllm:kv_cache_usage_perc", "gauge"), ("vllm:gpu_cache_usage_perc", "gauge"),
                    ("vllm:cache_config_info", "gauge")]
        # The prefix cache's counters, when the engine caches prefixes (not with Gemma 3's window pool).
        caches_prefixes = "ember_prefix_cache_queries" in families
        self.assertEqual("vllm:prefix_cache_queries" in families, caches_prefixes)
        if caches_prefixes:
            expected += [("vllm:prefix_cache_queries", "counter"), ("vllm:prefix_cache_hits", "counter")]
        for name, kind in expected:
            self.assertIn(name, families)
            self.assertEqual(families[name].type, kind, name)
        self.assertEqual(value("vllm:num_requests_waiting"), value("ember_num_requests_waiting"))
        self.assertEqual(value("vllm:num_requests_running"), 0)
        self.assertTrue(0 <= value("vllm:kv_cache_usage_perc") <= 1)
        self.assertEqual(value("vllm:kv_cache_usage_perc"), value("ember_kv_cache_usage_perc"))
        info = [s for s in families["vllm:cache_config_info"].samples]
        self.assertEqual(len(info), 1)
        self.assertEqual(info[0].labels, {**model, "block_size": "16", "num_gpu_blocks": "1024"})
        self.assertEqual(info[0].value, 1)

    def test_metrics_when_enabled_and_asked(self):
        for create, kwargs in (
            (with_metrics.client.chat.completions.create, {"messages": chat_messages("Count to ten.")}),
            (with_metrics.client.completions.create, {"prompt": "Once upon a time"}),
        ):
            response = create(model=MODEL_ID, temperature=0, max_tokens=8,
                              extra_body={"include_metrics": True, "ignore_eos": True}, **kwargs)
            self.assertEqual(response.usage.completion_tokens, 8)
            self.assert_consistent_metrics(response.model_extra.get("metrics"), 8)
            self.assert_timings(response.model_extra.get("timings"), response.model_extra["metrics"],
                                response.usage.model_dump())

    def test_timings_in_the_raw_json_as_llama_server_sends_them(self):
        # What a tool written for llama-server parses: the body's own JSON, not the client's model.
        raw = with_metrics.client.chat.completions.with_raw_response.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=4,
            extra_body={"include_metrics": True, "ignore_eos": True})
        body = raw.http_response.json()
        self.assertIn("timings", body)
        self.assert_timings(body["timings"], body["metrics"], body["usage"])
        self.assertIsInstance(body["timings"]["predicted_n"], int)
        # Several choices: null, as `metrics` (whose prompt time would it be?).
        raw = with_metrics.client.completions.with_raw_response.create(
            model=MODEL_ID, temperature=0, prompt="Hi", max_tokens=2, n=2, extra_body={"include_metrics": True})
        body = raw.http_response.json()
        self.assertIsNone(body["timings"])
        self.assertIsNone(body["metrics"])

    def test_no_metrics_when_not_asked(self):
        response = with_metrics.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=4)
        self.assertNotIn("metrics", response.model_extra)
        self.assertNotIn("timings", response.model_extra)
        chunks = list(with_metrics.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=4, stream=True,
            stream_options={"include_usage": True}))
        self.assertTrue(all("metrics" not in c.model_extra and "timings" not in c.model_extra for c in chunks))

    def test_no_metrics_when_not_enabled(self):
        response = plain.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=4, extra_body={"include_metrics": True})
        self.assertNotIn("metrics", response.model_extra)
        chunks = list(plain.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=4, stream=True,
            stream_options={"include_usage": True}, extra_body={"include_metrics": True}))
        self.assertIsNotNone(chunks[-1].usage)
        self.assertTrue(all("metrics" not in c.model_extra for c in chunks))

    def test_metrics_headers(self):
        raw = with_metrics.client.chat.completions.with_raw_response.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=5,
            extra_body={"include_metrics": True, "ignore_eos": True})
        body = raw.parse()
        names = {"X-Ember-Time-To-First-Token-Ms": "time_to_first_token_ms",
                 "X-Ember-Generation-Time-Ms": "generation_time_ms", "X-Ember-Queue-Time-Ms": "queue_time_ms",
                 "X-Ember-Mean-Itl-Ms": "mean_itl_ms", "X-Ember-Tokens-Per-Second": "tokens_per_second"}
        for header, field in names.items():
            # Headers are rounded to 3 decimals.
            self.assertAlmostEqual(float(raw.headers[header]), body.model_extra["metrics"][field], delta=6e-4)
        # Server-Timing: queue, ttft, gen, e2e in that order, the first three the X-Ember values.
        entries = [entry.split(";dur=") for entry in raw.headers["Server-Timing"].split(", ")]
        self.assertEqual([name for name, _ in entries], ["queue", "ttft", "gen", "e2e"])
        durations = {name: float(dur) for name, dur in entries}
        self.assertEqual(durations["queue"], float(raw.headers["X-Ember-Queue-Time-Ms"]))
        self.assertEqual(durations["ttft"], float(raw.headers["X-Ember-Time-To-First-Token-Ms"]))
        self.assertEqual(durations["gen"], float(raw.headers["X-Ember-Generation-Time-Ms"]))
        # End to end spans the other three (arrival ≤ queued, and the end follows the last token); the slack is
        # the rounding of four values to 3 decimals, not a timing bound.
        self.assertGreaterEqual(durations["e2e"] + 2e-3, durations["queue"] + durations["ttft"] + durations["gen"])
        raw = plain.client.chat.completions.with_raw_response.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=2)
        self.assertFalse([h for h in raw.headers if h.lower().startswith("x-ember-")])
        self.assertNotIn("server-timing", raw.headers)

    def test_prompt_scores_with_echo_and_prompt_logprobs(self):
        # The legacy way to score a text: echo with logprobs, the prompt's tokens first (the first with nulls).
        prompt = "The capital of France is"
        response = plain.client.completions.create(
            model=MODEL_ID, prompt=prompt, max_tokens=3, temperature=0, logprobs=1, echo=True)
        choice = response.choices[0]
        self.assertTrue(choice.text.startswith(prompt))
        lp = choice.logprobs
        # The tokens spell the text, but for a BOS the tokenizer added (Gemma's "<bos>"), which takes no room.
        added = 1 if not choice.text.startswith(lp.tokens[0]) else 0
        self.assertEqual(lp.text_offset[:added + 1], [0] * (added + 1))
        self.assertEqual("".join(lp.tokens[added:]), choice.text)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        self.assertTrue(all(x <= 0 for x in lp.token_logprobs[1:]))
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        # vLLM's prompt_logprobs (an extension, so through extra_body and the response's extra fields).
        response = plain.client.completions.create(
            model=MODEL_ID, prompt=prompt, max_tokens=2, temperature=0, extra_body={"prompt_logprobs": 2})
        scored = response.choices[0].to_dict()["prompt_logprobs"]
        self.assertIsNone(scored[0])
        self.assertEqual(len(scored), len(lp.tokens) - 3, "one entry per prompt token")
        for position, token in zip(scored[1:], lp.tokens[1:]):
            first = next(iter(position.values()))
            self.assertEqual(first["decoded_token"], token, "the prompt token comes first")
            self.assertGreaterEqual(first["rank"], 1)
        with self.assertRaises(openai.BadRequestError) as caught:
            plain.client.chat.completions.create(
                model=MODEL_ID, messages=chat_messages("Hi"), extra_body={"prompt_logprobs": 1})
        self.assertEqual(caught.exception.param, "prompt_logprobs")

    def test_invalid_request_is_400(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            plain.client.chat.completions.create(model=MODEL_ID, messages=chat_messages("Hi"), temperature=5)
        self.assertEqual(caught.exception.status_code, 400)
        self.assertEqual(caught.exception.param, "temperature")
        self.assertEqual(caught.exception.type, "invalid_request_error")
        with self.assertRaises(openai.BadRequestError) as caught:
            plain.client.chat.completions.create(model=MODEL_ID, temperature=0, messages=[])
        self.assertEqual(caught.exception.param, "messages")

    def test_unimplemented_and_unknown_fields_are_refused_by_name(self):
        # A client must not believe it got a constraint, a tool call or best-of sampling that ember did not give.
        refused = [
            ({}, {"best_of": 3}),
            ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
              "response_format": {"type": "json_object"}}, {}),
            ({}, {"temprature": 0.5}),
        ]
        for fields, extra in refused:
            with self.assertRaises(openai.BadRequestError) as caught:
                plain.client.chat.completions.create(
                    model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=2, extra_body=extra, **fields)
            self.assertEqual(caught.exception.status_code, 400)
            self.assertIn(caught.exception.param, list(fields) + list(extra), caught.exception.message)
        # The same fields with the values that ask for nothing are accepted.
        response = plain.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=2, logprobs=False, tools=None,
            response_format={"type": "text"})
        self.assertEqual(response.choices[0].logprobs, None)

    def test_logprobs_chat_and_completions_stream_and_not(self):
        # Chat: the typed ChoiceLogprobs, one entry per token, exactly top_logprobs alternatives.
        response = plain.client.chat.completions.create(
            model=MODEL_ID, messages=chat_messages("What is the capital of France?"), max_tokens=6, temperature=0,
            logprobs=True, top_logprobs=3)
        content = response.choices[0].logprobs.content
        self.assertTrue(content)
        self.assertEqual(b"".join(bytes(t.bytes) for t in content).decode("utf-8", "replace")
                         .startswith(response.choices[0].message.content), True)
        for t in content:
            self.assertLessEqual(t.logprob, 0)
            self.assertEqual(len(t.top_logprobs), 3)
            self.assertEqual(t.top_logprobs[0].logprob, t.logprob, "greedy samples the most likely token")
        stream = plain.client.chat.completions.create(
            model=MODEL_ID, messages=chat_messages("What is the capital of France?"), max_tokens=6, temperature=0,
            logprobs=True, top_logprobs=3, stream=True)
        streamed = [t for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
        self.assertEqual([(t.token, t.logprob) for t in streamed], [(t.token, t.logprob) for t in content])
        # Completions: the legacy parallel arrays, the sampled token always among top_logprobs.
        response = plain.client.completions.create(
            model=MODEL_ID, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=2)
        lp = response.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(lp.token_logprobs))
        self.assertEqual(len(lp.tokens), len(lp.text_offset))
        self.assertEqual(lp.text_offset[0], 0)
        for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertEqual(top.get(token), logprob)
        stream = plain.client.completions.create(
            model=MODEL_ID, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=2, stream=True)
        streamed = [t for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
        self.assertEqual(streamed, lp.tokens)
        with self.assertRaises(openai.BadRequestError) as caught:
            plain.client.chat.completions.create(
                model=MODEL_ID, messages=chat_messages("Hi"), logprobs=True, top_logprobs=21)
        self.assertEqual(caught.exception.param, "top_logprobs")

    def test_structured_output_parses_into_a_pydantic_model(self):
        class Person(pydantic.BaseModel):
            name: str = pydantic.Field(max_length=16)
            age: int = pydantic.Field(ge=0, le=150)
            color: typing.Literal["red", "green", "blue"]

        # The client turns the model into a strict json_schema response_format and parses the content back.
        completions = getattr(plain.client.beta.chat, "completions", None) or plain.client.chat.completions
        response = completions.parse(
            model=MODEL_ID, messages=chat_messages("Describe a person with a name, an age and a favourite color."),
            response_format=Person, max_tokens=64, temperature=0)
        choice = response.choices[0]
        self.assertEqual(choice.finish_reason, "stop", choice.message.content)
        self.assertIsNotNone(choice.message.parsed)
        self.assertIn(choice.message.parsed.color, ("red", "green", "blue"))

    def test_guided_choice_and_an_invalid_schema(self):
        response = plain.client.chat.completions.create(
            model=MODEL_ID, messages=chat_messages("Is the sky blue? Answer yes or no."), max_tokens=4,
            extra_body={"guided_choice": ["yes", "no"]})
        self.assertIn(response.choices[0].message.content, ("yes", "no"))
        with self.assertRaises(openai.BadRequestError) as caught:
            plain.client.chat.completions.create(
                model=MODEL_ID, messages=chat_messages("Hi"), max_tokens=2,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}})
        self.assertEqual(caught.exception.status_code, 400)
        self.assertEqual(caught.exception.param, "response_format.json_schema.schema")
        self.assertIn("objekt", caught.exception.message)

    def test_forced_tool_call(self):
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            # Closed to other keys: a base model (Gemma 3 270M) otherwise goes on to recite the schema, and no
            # bounded max_tokens then holds the call.
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                           "required": ["city"], "additionalProperties": False}}}]
        messages = chat_messages("What is the weather in Paris?")
        response = plain.client.chat.completions.create(
            model=MODEL_ID, messages=messages, tools=tools, tool_choice="required", max_tokens=48, temperature=0)
        choice = response.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        self.assertIsNone(choice.message.content)
        call = choice.message.tool_calls[0]
        self.assertTrue(call.id.startswith("call_"))
        self.assertEqual(call.function.name, "get_weather")
        self.assertIsInstance(json.loads(call.function.arguments)["city"], str)
        # Streamed: the client's deltas add up to the same call.
        stream = plain.client.chat.completions.create(
            model=MODEL_ID, messages=messages, tools=tools, max_tokens=48, temperature=0, stream=True,
            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        names, arguments, reasons = [], "", []
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            for d in delta.tool_calls or []:
                if d.function.name:
                    names.append(d.function.name)
                arguments += d.function.arguments or ""
            if chunk.choices[0].finish_reason:
                reasons.append(chunk.choices[0].finish_reason)
        self.assertEqual((names, reasons), (["get_weather"], ["tool_calls"]))
        self.assertIsInstance(json.loads(arguments)["city"], str)

    def test_auto_tool_choice_is_a_message_or_a_call(self):
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                           "required": ["city"], "additionalProperties": False}}}]
        messages = chat_messages("What is the weather in Paris?")
        # No tool_choice: "auto", OpenAI's default with tools. The model decides; unbiased SmolLM2 answers in prose,
        # and a bias on the tokens "{" and "{\"" (SmolLM2's ids 107 and 39428) makes it begin a call, which the
        # grammar then makes valid. Either way the response, whole or streamed, must be well formed and agree.
        # The bias names SmolLM2's token ids: another model (Gemma 3, the second run) gets the unbiased case only.
        biases = [{}, {"107": 100, "39428": 100}] if MODEL_ID.startswith("SmolLM2") else [{}]
        for bias in biases:
            response = plain.client.chat.completions.create(
                model=MODEL_ID, messages=messages, tools=tools, max_tokens=64, temperature=0, logit_bias=bias)
            choice = response.choices[0]
            stream = plain.client.chat.completions.create(
                model=MODEL_ID, messages=messages, tools=tools, max_tokens=64, temperature=0, logit_bias=bias,
                stream=True)
            content, calls, reasons = "", [], []
            for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                content += delta.content or ""
                for d in delta.tool_calls or []:
                    if d.id:
                        calls.append([d.id, d.function.name, ""])
                    calls[-1][2] += d.function.arguments or ""
                if chunk.choices[0].finish_reason:
                    reasons.append(chunk.choices[0].finish_reason)
            self.assertEqual(reasons, [choice.finish_reason])
            if choice.message.tool_calls:
                self.assertEqual(choice.finish_reason, "tool_calls")
                self.assertIsNone(choice.message.content)
                call = choice.message.tool_calls[0]
                self.assertTrue(call.id.startswith("call_"))
                self.assertEqual(call.function.name, "get_weather")
                self.assertIsInstance(json.loads(call.function.arguments)["city"], str)
                self.assertEqual([c[1:] for c in calls], [[call.function.name, call.function.arguments]])
                self.assertEqual(content, "")
            else:
                self.assertNotEqual(choice.finish_reason, "tool_calls")
                self.assertIsInstance(choice.message.content, str)
                self.assertEqual((content, calls), (choice.message.content, []))
            if bias:
                self.assertEqual(choice.finish_reason, "tool_calls", "the biased reply is a call")

    @unittest.skipUnless(MODEL_ID.startswith("SmolLM2"), "the bias steers SmolLM2's tokens")
    def test_tool_call_round_trip_in_each_familys_format(self):
        # A call, its result sent back, and the final answer, with the official client, on gateways whose
        # --chat-template is a real family's (SmolLM2 underneath: the format is the template's). An earlier call in
        # the conversation puts the family's marker in the prompt, and a bias on its tokens makes the model write
        # it; the grammar then makes a valid call. Mistral Nemo's template takes back only 9-character ids.
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                           "required": ["city"], "additionalProperties": False}}}]
        earlier = [
            {"role": "user", "content": "What is the weather in Tokyo?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}}]},
            {"role": "tool", "tool_call_id": "call00001", "content": "Rain, 12 C"},
            {"role": "assistant", "content": "It rains in Tokyo."},
            {"role": "user", "content": "And in Paris?"}]
        for template, marker, id_length in [
                ("meta-llama-Llama-3.1-8B-Instruct", '{"', 29),
                ("Qwen-Qwen2.5-7B-Instruct", "<tool_call>", 29),
                ("mistralai-Mistral-Nemo-Instruct-2407", "[TOOL_CALLS][", 9),
                ("unsloth-mistral-Devstral-Small-2507", "[TOOL_CALLS]", 29),
                ("Qwen3-Coder", "<tool_call>", 29),
                (PHI4_MINI_TEMPLATE, "functools[", 29)]:
            with self.subTest(template=template):
                path = template if os.path.isabs(template) else os.path.join(TEMPLATES, template + ".jinja")
                gateway = Gateway("--chat-template", path)
                try:
                    ids = gateway.post_json("/tokenize", {"prompt": marker, "add_special_tokens": False})["tokens"]
                    response = gateway.client.chat.completions.create(
                        model=MODEL_ID, messages=earlier, tools=tools, temperature=0, max_tokens=96,
                        parallel_tool_calls=False, logit_bias={str(i): 100 for i in ids})
                    choice = response.choices[0]
                    self.assertEqual(choice.finish_reason, "tool_calls", choice)
                    call = choice.message.tool_calls[0]
                    self.assertEqual((call.function.name, len(call.id)), ("get_weather", id_length), call)
                    self.assertIsInstance(json.loads(call.function.arguments)["city"], str)
                    # The call and its result go back; the model answers (tools no longer offered to it).
                    messages = earlier + [choice.message.model_dump(exclude_none=True),
                                          {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
                    final = gateway.client.chat.completions.create(
                        model=MODEL_ID, messages=messages, tools=tools, tool_choice="none", temperature=0,
                        max_tokens=8)
                    self.assertIsInstance(final.choices[0].message.content, str)
                    self.assertIsNone(final.choices[0].message.tool_calls)
                finally:
                    self.assertEqual(gateway.stop(), 0, gateway.stderr())
                    gateway.log.close()

    def test_reasoning_apart_whole_and_streamed(self):
        # Qwen 3's template (SmolLM2 underneath), the output steered by guided_regex: the official client reads the
        # reasoning in reasoning_content (message and deltas) and counts it in usage; the answer goes back as the
        # next turn's history.
        gateway = Gateway("--chat-template", os.path.join(TEMPLATES, "Qwen-Qwen3-0.6B.jinja"))
        try:
            messages = [{"role": "user", "content": "Say hello."}]
            steer = {"guided_regex": "<think>\\nI should greet\\.\\n</think>\\n\\nHello!"}
            response = gateway.client.chat.completions.create(
                model=MODEL_ID, messages=messages, temperature=0, max_tokens=48, extra_body=steer)
            message = response.choices[0].message
            self.assertEqual((message.reasoning_content, message.content), ("\nI should greet.\n", "Hello!"))
            reasoning_tokens = response.usage.completion_tokens_details.reasoning_tokens
            self.assertTrue(0 < reasoning_tokens < response.usage.completion_tokens, response.usage)
            stream = gateway.client.chat.completions.create(
                model=MODEL_ID, messages=messages, temperature=0, max_tokens=48, extra_body=steer, stream=True,
                stream_options={"include_usage": True})
            reasoning, content, usage = "", "", None
            for chunk in stream:
                usage = chunk.usage or usage
                if chunk.choices:
                    reasoning += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
                    content += chunk.choices[0].delta.content or ""
            self.assertEqual((reasoning, content), (message.reasoning_content, message.content))
            self.assertEqual(usage.completion_tokens_details.reasoning_tokens, reasoning_tokens)
            final = gateway.client.chat.completions.create(
                model=MODEL_ID, messages=messages + [message.model_dump(exclude_none=True),
                                                     {"role": "user", "content": "Again."}],
                temperature=0, max_tokens=8, reasoning_effort="none")
            self.assertIsInstance(final.choices[0].message.content, str)
            self.assertEqual(final.usage.completion_tokens_details.reasoning_tokens, 0)
        finally:
            self.assertEqual(gateway.stop(), 0, gateway.stderr())
            gateway.log.close()

    def test_models_and_health(self):
        models = plain.client.models.list().data
        self.assertEqual([m.id for m in models], [MODEL_ID])
        self.assertGreater(models[0].model_extra["max_model_len"], 0)
        health = plain.get_json("/health")
        self.assertEqual(health["status"], "ok")
        self.assertIn("requests_in_flight", health)

    def test_tokenize_counts_what_a_completion_bills(self):
        messages = chat_messages("Name a color.")
        tokenized = plain.post_json("/tokenize", {"model": MODEL_ID, "messages": messages})
        self.assertEqual(tokenized["count"], len(tokenized["tokens"]))
        response = plain.client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=1)
        self.assertEqual(response.usage.prompt_tokens, tokenized["count"])
        prompt = "The capital of France is"
        tokenized = plain.post_json("/tokenize", {"prompt": prompt})
        response = plain.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=1)
        self.assertEqual(response.usage.prompt_tokens, tokenized["count"])
        text = plain.post_json("/detokenize", {"tokens": tokenized["tokens"], "skip_special_tokens": True})["prompt"]
        self.assertEqual(text, prompt)
        self.assertEqual(tokenized["max_model_len"], plain.client.models.list().data[0].model_extra["max_model_len"])

    def test_32_concurrent_clients(self):
        before = with_metrics.counter("chat", 200)

        def one(i):
            response = with_metrics.client.chat.completions.create(
                model=MODEL_ID, temperature=0, messages=chat_messages(f"Say the number {i}."), max_tokens=4,
                extra_body={"ignore_eos": True})
            return response.usage.completion_tokens

        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            tokens = list(pool.map(one, range(32)))
        self.assertEqual(tokens, [4] * 32)
        self.assertEqual(with_metrics.counter("chat", 200) - before, 32)

    def test_disconnect_mid_stream_cancels_the_request(self):
        before = with_metrics.counter("chat", 499)
        # Without cancellation this request would run for minutes.
        stream = with_metrics.client.chat.completions.create(
            model=MODEL_ID, temperature=0, messages=chat_messages("Tell me a long story."), max_tokens=4000, stream=True,
            extra_body={"ignore_eos": True})
        for _, _chunk in zip(range(3), stream):
            pass
        wait_until(lambda: with_metrics.get_json("/health")["requests_in_flight"] == 1, "only this request runs")
        self.assertEqual(with_metrics.get_json("/health")["engine"]["running"], 1, "it streamed: it runs")
        stream.close()
        # The gateway counts 499 only once the engine has ended the cancelled request (the binding drains it).
        wait_until(lambda: with_metrics.counter("chat", 499) == before + 1, "the gateway counts the disconnect")
        health = with_metrics.get_json("/health")
        self.assertEqual(health["requests_in_flight"], 0)
        # The engine's own counters (engine_get_stats): nothing runs or waits, and every KV block is free again.
        engine = health["engine"]
        self.assertEqual((engine["running"], engine["waiting"]), (0, 0), health)
        self.assertEqual(engine["kv_blocks_free"], engine["kv_blocks_total"], health)
        # A model with sliding-window layers (Gemma 3) has a second pool, for them: free again too.
        self.assertEqual("kv_window_blocks_total" in engine, "gemma" in MODEL.lower(), health)
        self.assertEqual(engine.get("kv_window_blocks_free"), engine.get("kv_window_blocks_total"), health)
        # Other models cache prefixes by default: the counters are there, hits never above queries.
        self.assertEqual("prefix_cache_hits" in engine, "gemma" not in MODEL.lower(), health)
        self.assertLessEqual(engine.get("prefix_cache_hits", 0), engine.get("prefix_cache_queries", 0), health)


class APIKeyTest(unittest.TestCase):
    def test_a_gateway_with_a_key_serves_the_client_that_has_it(self):
        with tempfile.TemporaryDirectory() as directory:
            access_log = os.path.join(directory, "access.log")
            gateway = Gateway("--api-key", "sk-ember-test", "--access-log", access_log)
            self.addCleanup(gateway.log.close)
            try:
                client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-ember-test", max_retries=0,
                                       timeout=PATIENCE_S)
                response = client.chat.completions.create(
                    model=MODEL_ID, temperature=0, messages=chat_messages("Hi"), max_tokens=2,
                    extra_body={"ignore_eos": True})
                self.assertEqual(response.usage.completion_tokens, 2)
                self.assertEqual(client.models.retrieve(MODEL_ID).id, MODEL_ID)
                with self.assertRaises(openai.NotFoundError):
                    client.models.retrieve("no-such-model")
                # Gateway.client presents the key "unused".
                with self.assertRaises(openai.AuthenticationError) as refused:
                    gateway.client.chat.completions.create(model=MODEL_ID, messages=chat_messages("Hi"), max_tokens=2)
                self.assertEqual(refused.exception.code, "invalid_api_key")
                # The health check needs no key.
                self.assertEqual(gateway.get_json("/health")["status"], "ok")
            finally:
                self.assertEqual(gateway.stop(), 0, gateway.stderr())
            # One line per request, in order: the completion under the engine's id, with its tokens.
            with open(access_log) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual([(line["route"], line["status"]) for line in lines],
                             [("chat", 200), ("models", 200), ("models", 404), ("chat", 401), ("health", 200)])
            self.assertEqual(lines[0]["id"], response.id)
            self.assertEqual((lines[0]["prompt_tokens"], lines[0]["completion_tokens"]),
                             (response.usage.prompt_tokens, 2))
            self.assertNotIn("prompt_tokens", lines[3])


class ShutdownTest(unittest.TestCase):
    def test_sigterm_lets_running_requests_finish(self):
        gateway = Gateway()
        self.addCleanup(gateway.log.close)
        result = {}

        def request():
            result["response"] = gateway.client.completions.create(
                model=MODEL_ID, temperature=0, prompt="Once upon a time", max_tokens=128, extra_body={"ignore_eos": True})

        worker = threading.Thread(target=request)
        worker.start()
        wait_until(lambda: gateway.get_json("/health")["requests_in_flight"] == 1, "the request runs")
        gateway.terminate()
        worker.join(timeout=PATIENCE_S)
        status = gateway.stop()
        self.assertEqual(status, 0, gateway.stderr())
        self.assertEqual(result["response"].usage.completion_tokens, 128)
        self.assertEqual(result["response"].choices[0].finish_reason, "length")


if __name__ == "__main__":
    unittest.main(verbosity=2)
