#!/usr/bin/env python3
"""End-to-end tests of the gateway's other APIs, each with its official client: OpenAI's Responses API with the
`openai` package (`responses.create`, `responses.stream`, `responses.parse`, function tools, `previous_response_id`),
and, in their own classes, Anthropic's Messages API, Ollama's API and llama-server's native endpoints.

    EMBER_GATEWAY=target/go/ember-gateway python3 tests/e2e/test_gateway_apis.py   (`make go-test` runs it)

Environment: EMBER_GATEWAY, EMBER_MODEL (as tests/e2e/test_gateway.py). Requests are greedy and short.
"""

import json
import os
import selectors
import subprocess
import sys
import tempfile
import unittest
import urllib.request

import openai
import pydantic

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GATEWAY = os.path.join(ROOT, os.environ.get("EMBER_GATEWAY", "target/go/ember-gateway"))
MODEL = os.path.join(ROOT, os.environ.get("EMBER_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
PATIENCE_S = 60


class Gateway:
    """One gateway process over the model, on a free loopback port."""

    def __init__(self, *flags):
        self.log = tempfile.TemporaryFile()
        command = [GATEWAY, "--listen", "127.0.0.1:0", "--threads", "2", "--model", MODEL, *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, text=True)
        selector = selectors.DefaultSelector()
        selector.register(self.process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=PATIENCE_S):
            self.process.kill()
            raise RuntimeError("the gateway did not start:\n" + self.stderr())
        line = self.process.stdout.readline()
        if "listening on " not in line:
            self.process.wait()
            raise RuntimeError(f"the gateway did not start ({line!r}):\n" + self.stderr())
        self.url = line.split("listening on ", 1)[1].strip()

    def stderr(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def post(self, path, body, headers=None):
        """POST a JSON body: (status, headers, body bytes), errors included."""
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def get_json(self, path):
        with urllib.request.urlopen(self.url + path, timeout=PATIENCE_S) as response:
            return json.load(response)

    def stop(self):
        self.process.terminate()
        try:
            return self.process.wait(timeout=PATIENCE_S)
        finally:
            self.process.stdout.close()


gateway = None


def setUpModule():
    global gateway
    gateway = Gateway("--enable-per-request-metrics")


def tearDownModule():
    if gateway is not None:
        gateway.stop()


WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class ResponsesTest(unittest.TestCase):
    """OpenAI's Responses API with the official `openai` client."""

    def setUp(self):
        self.client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0,
                                    timeout=PATIENCE_S)

    def test_create_and_the_same_chat_agree(self):
        r = self.client.responses.create(model="m", input="What is the capital of France?",
                                         instructions="Answer briefly.", max_output_tokens=12, temperature=0)
        chat = self.client.chat.completions.create(model="m", max_tokens=12, temperature=0, messages=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"}])
        self.assertEqual(r.output_text, chat.choices[0].message.content)
        self.assertIn(r.status, ("completed", "incomplete"))
        self.assertEqual(r.usage.input_tokens, chat.usage.prompt_tokens)
        self.assertEqual(r.usage.output_tokens, chat.usage.completion_tokens)

    def test_stream_helper_accumulates_the_events(self):
        with self.client.responses.stream(model="m", input="Name three primary colors.", max_output_tokens=24,
                                          temperature=0) as stream:
            deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
            final = stream.get_final_response()
        self.assertEqual(final.output_text, deltas)
        whole = self.client.responses.create(model="m", input="Name three primary colors.", max_output_tokens=24,
                                             temperature=0)
        self.assertEqual(final.output_text, whole.output_text)

    def test_stream_events_on_the_wire_are_named(self):
        status, headers, body = gateway.post("/v1/responses", {"input": "hi", "stream": True,
                                                               "max_output_tokens": 4})
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/event-stream"))
        events = [e for e in body.decode().split("\n\n") if e]
        for event in events:
            name, data = event.split("\n", 1)
            self.assertEqual(name[len("event: "):], json.loads(data[len("data: "):])["type"])
        self.assertNotIn("[DONE]", body.decode(), "the Responses stream ends without [DONE]")

    def test_function_call_round_trip_with_previous_response_id(self):
        r = self.client.responses.create(model="m", input="What is the weather in Paris?", tools=[WEATHER_TOOL],
                                         tool_choice="required", temperature=0, max_output_tokens=64)
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertIsInstance(json.loads(calls[0].arguments)["city"], str)
        follow = self.client.responses.create(
            model="m", previous_response_id=r.id, tools=[WEATHER_TOOL], temperature=0, max_output_tokens=16,
            input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"}])
        self.assertEqual(follow.previous_response_id, r.id)
        self.assertGreater(follow.usage.input_tokens, r.usage.input_tokens)

    def test_parse_with_a_pydantic_model(self):
        class Answer(pydantic.BaseModel):
            answer: int

        parsed = self.client.responses.parse(model="m", input="What is 7 times 8?", text_format=Answer,
                                             temperature=0, max_output_tokens=30)
        self.assertIsInstance(parsed.output_parsed.answer, int)

    def test_refusals_are_openai_errors_naming_the_field(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.responses.create(model="m", input="x", background=True)
        self.assertEqual(caught.exception.body["param"], "background")
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.responses.create(model="m", input="x", previous_response_id="resp_unknown")
        self.assertEqual(caught.exception.body["param"], "previous_response_id")

    def test_metrics_behind_the_double_gate(self):
        r = self.client.responses.create(model="m", input="hi", max_output_tokens=4,
                                         extra_body={"include_metrics": True})
        self.assertGreaterEqual(r.model_extra["metrics"]["time_to_first_token_ms"], 0)
        plain = self.client.responses.create(model="m", input="hi", max_output_tokens=4)
        self.assertNotIn("metrics", plain.model_extra or {})

    def test_field_policy_warning_header(self):
        status, headers, _ = gateway.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "verbosity": "low",
            "modalities": ["text"]})
        self.assertEqual(status, 200)
        self.assertIn("verbosity", headers["Warning"])
        status, _, body = gateway.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "modalities": ["audio"]})
        self.assertEqual((status, json.loads(body)["error"]["param"]), (400, "modalities[0]"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
