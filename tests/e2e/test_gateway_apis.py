#!/usr/bin/env python3
"""End-to-end tests of examples/gateway's routes in other APIs' shapes, each with that API's official client.

One class per API, over one gateway shared by the module (tests/e2e/test_gateway.py's Gateway, with per-request
metrics enabled):

- OllamaTest: /api/chat, /api/generate, /api/tags, /api/show with the official `ollama` client (its own gateway).
- LlamaServerTest: llama-server's /completion (whole, streamed as its own clients read it, n_probs), /tokenize and
  /detokenize in its shape, /props and /slots, over plain HTTP (its own gateway).
- ResponsesTest: POST /v1/responses with the official `openai` client: `responses.create` says what the same chat
  says, `responses.stream` (the helper's accumulated response), the named SSE events on the wire, a function call
  round trip over `previous_response_id`, `responses.parse` with a pydantic model, refusals naming the field, the
  metrics double gate, and the field policy's `Warning` header on chat.

- AnthropicMessagesTest: POST /v1/messages with the official `anthropic` client (`pip install anthropic`):
  `messages.create` says what the same OpenAI chat says, `messages.stream` (its text_stream and final message),
  a forced tool's `tool_use` whole and streamed, a tool result sent back, stop sequences, errors as
  `anthropic.BadRequestError`, an API key as `x-api-key`, and `messages.count_tokens` counting the prompt the
  same message bills (POST /v1/messages/count_tokens).

    EMBER_GATEWAY=target/go/ember-gateway python3 tests/e2e/test_gateway_apis.py   (`make go-test` runs it)

Environment: as tests/e2e/test_gateway.py (EMBER_GATEWAY, EMBER_MODEL). Requests are greedy (`temperature=0`)
and short.
"""

import json
import os
import sys
import unittest
import urllib.error
import urllib.request

import anthropic
import ollama
import openai
import pydantic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gateway import MODEL_ID, PATIENCE_S, Gateway  # noqa: E402  (after the path it is found on)

# The gateway of the module's tests.
gateway = None


def setUpModule():
    global gateway
    gateway = Gateway("--enable-per-request-metrics")


def tearDownModule():
    if gateway is not None:
        status = gateway.stop()
        assert status == 0, f"gateway exited with {status}:\n{gateway.stderr()}"
        gateway.log.close()


def post(path, body, headers=None):
    """POST a JSON body to the module's gateway: (status, headers, body bytes), errors included."""
    request = urllib.request.Request(gateway.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def anthropic_client(url, api_key="unused"):
    """The official client on the gateway: the SDK adds /v1/messages to the base URL."""
    return anthropic.Anthropic(base_url=url, api_key=api_key, max_retries=0, timeout=PATIENCE_S)


# Greedy decoding. Anthropic's API takes `temperature`, but the client has no argument for it (nor for top_p and
# top_k) any more: it goes as an extra field of the body.
GREEDY = {"temperature": 0}

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    # No other property: the forced call's grammar then closes the input after the city (the small model would
    # otherwise invent properties until max_tokens).
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                     "additionalProperties": False},
}


def text_of(message):
    return "".join(block.text for block in message.content if block.type == "text")


class AnthropicMessagesTest(unittest.TestCase):
    """POST /v1/messages under the official Anthropic client."""

    @classmethod
    def setUpClass(cls):
        cls.client = anthropic_client(gateway.url)

    def create(self, extra_body=None, **kwargs):
        return self.client.messages.create(model=MODEL_ID, extra_body={**GREEDY, **(extra_body or {})}, **kwargs)

    def test_create_says_what_the_same_chat_says(self):
        user = {"role": "user", "content": "What is the capital of France?"}
        message = self.create(max_tokens=16, system="Answer briefly.", messages=[user])
        chat = gateway.client.chat.completions.create(
            model=MODEL_ID, max_tokens=16, temperature=0,
            messages=[{"role": "system", "content": "Answer briefly."}, user])
        self.assertEqual(text_of(message), chat.choices[0].message.content)
        self.assertTrue(message.id.startswith("msg_"), message.id)
        self.assertEqual((message.type, message.role, message.model), ("message", "assistant", MODEL_ID))
        self.assertIn(message.stop_reason, ("end_turn", "max_tokens"))
        self.assertIsNone(message.stop_sequence)
        self.assertEqual(message.usage.output_tokens, chat.usage.completion_tokens)
        # Anthropic counts the prompt tokens read from the prefix cache apart.
        self.assertEqual(message.usage.input_tokens + message.usage.cache_read_input_tokens,
                         chat.usage.prompt_tokens)

    def test_stream_adds_up_to_the_message(self):
        kwargs = {"max_tokens": 16, "messages": [{"role": "user", "content": "Name three primary colors."}]}
        whole = self.create(**kwargs)
        with self.client.messages.stream(model=MODEL_ID, extra_body=GREEDY, **kwargs) as stream:
            streamed = "".join(stream.text_stream)
            final = stream.get_final_message()
        self.assertEqual(streamed, text_of(whole))
        self.assertEqual(text_of(final), streamed)
        self.assertEqual((final.id[:4], final.stop_reason), ("msg_", whole.stop_reason))
        self.assertEqual(final.usage.output_tokens, whole.usage.output_tokens)

    def test_tool_use_round_trip(self):
        question = {"role": "user", "content": "What is the weather in Paris?"}
        forced = {"type": "tool", "name": "get_weather"}
        message = self.create(max_tokens=64, tools=[WEATHER_TOOL], tool_choice=forced, messages=[question])
        self.assertEqual(message.stop_reason, "tool_use")
        calls = [block for block in message.content if block.type == "tool_use"]
        self.assertEqual(len(calls), 1, message.content)
        call = calls[0]
        self.assertEqual(call.name, "get_weather")
        self.assertIsInstance(call.input.get("city"), str)
        self.assertTrue(call.id)

        # Streamed: the client builds the same input from the input_json_delta pieces.
        with self.client.messages.stream(model=MODEL_ID, extra_body=GREEDY, max_tokens=64, tools=[WEATHER_TOOL],
                                         tool_choice=forced, messages=[question]) as stream:
            final = stream.get_final_message()
        streamed_calls = [block for block in final.content if block.type == "tool_use"]
        self.assertEqual([(c.name, c.input) for c in streamed_calls], [(call.name, call.input)])
        self.assertEqual(final.stop_reason, "tool_use")

        # The result goes back in the next user turn, the call's turn as the client got it.
        answer = self.create(max_tokens=24, tools=[WEATHER_TOOL], messages=[
            question,
            {"role": "assistant", "content": message.content},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 degrees."}]},
        ])
        self.assertEqual(answer.type, "message")
        self.assertIn(answer.stop_reason, ("end_turn", "max_tokens", "tool_use"))

    def test_stop_sequences(self):
        messages = [{"role": "user", "content": "Count from 1 to 20."}]
        full = text_of(self.create(max_tokens=40, messages=messages))
        stop = full.split()[3]
        message = self.create(max_tokens=40, messages=messages, stop_sequences=["@@@", stop])
        self.assertEqual((message.stop_reason, message.stop_sequence), ("stop_sequence", stop))
        self.assertTrue(full.startswith(text_of(message)), (text_of(message), full))
        self.assertNotIn(stop, text_of(message))
        with self.client.messages.stream(model=MODEL_ID, extra_body=GREEDY, max_tokens=40, messages=messages,
                                         stop_sequences=[stop]) as stream:
            final = stream.get_final_message()
        self.assertEqual((final.stop_reason, final.stop_sequence), ("stop_sequence", stop))

    def test_errors_are_bad_request_errors_naming_the_field(self):
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
        with self.assertRaises(anthropic.BadRequestError) as caught:
            self.create(max_tokens=8, messages=[{"role": "user", "content": [image]}])
        self.assertEqual(caught.exception.status_code, 400)
        error = caught.exception.body["error"]
        self.assertEqual(error["type"], "invalid_request_error")
        self.assertIn("messages[0].content[0].type", error["message"])
        with self.assertRaises(anthropic.BadRequestError) as caught:
            self.create(max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"top_k": -3})
        self.assertIn("top_k", caught.exception.body["error"]["message"])

    def test_count_tokens_is_the_messages_input_tokens(self):
        question = [{"role": "user", "content": "What is the weather in Paris?"}]
        for extra in ({}, {"system": "Answer briefly."}, {"system": "Answer briefly.", "tools": [WEATHER_TOOL]}):
            counted = self.client.messages.count_tokens(model=MODEL_ID, messages=question, **extra)
            message = self.create(max_tokens=1, messages=question, **extra)
            self.assertEqual(counted.input_tokens,
                             message.usage.input_tokens + message.usage.cache_read_input_tokens, extra)
        with self.assertRaises(anthropic.BadRequestError) as caught:
            self.client.messages.count_tokens(model=MODEL_ID, messages=[{"role": "robot", "content": "x"}])
        self.assertEqual(caught.exception.body["error"]["type"], "invalid_request_error")
        self.assertIn("messages[0].role", caught.exception.body["error"]["message"])

    def test_api_key_as_x_api_key(self):
        keyed = Gateway("--api-key", "the-key")
        self.addCleanup(keyed.log.close)
        try:
            message = anthropic_client(keyed.url, "the-key").messages.create(
                model=MODEL_ID, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
            self.assertEqual(message.type, "message")
            with self.assertRaises(anthropic.AuthenticationError) as caught:
                anthropic_client(keyed.url, "another-key").messages.create(
                    model=MODEL_ID, max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
            self.assertEqual(caught.exception.body["error"]["type"], "authentication_error")
        finally:
            self.assertEqual(keyed.stop(), 0, keyed.stderr())



RESPONSES_WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city",
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
        status, headers, body = post("/v1/responses", {"input": "hi", "stream": True,
                                                               "max_output_tokens": 4})
        self.assertEqual(status, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/event-stream"))
        events = [e for e in body.decode().split("\n\n") if e]
        for event in events:
            name, data = event.split("\n", 1)
            self.assertEqual(name[len("event: "):], json.loads(data[len("data: "):])["type"])
        self.assertNotIn("[DONE]", body.decode(), "the Responses stream ends without [DONE]")

    def test_function_call_round_trip_with_previous_response_id(self):
        r = self.client.responses.create(model="m", input="What is the weather in Paris?", tools=[RESPONSES_WEATHER_TOOL],
                                         tool_choice="required", temperature=0, max_output_tokens=64)
        calls = [o for o in r.output if o.type == "function_call"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].name, "get_weather")
        self.assertIsInstance(json.loads(calls[0].arguments)["city"], str)
        follow = self.client.responses.create(
            model="m", previous_response_id=r.id, tools=[RESPONSES_WEATHER_TOOL], temperature=0, max_output_tokens=16,
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
        status, headers, _ = post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "verbosity": "low",
            "modalities": ["text"]})
        self.assertEqual(status, 200)
        self.assertIn("verbosity", headers["Warning"])
        status, _, body = post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "modalities": ["audio"]})
        self.assertEqual((status, json.loads(body)["error"]["param"]), (400, "modalities[0]"))


# llama-server's tests: a completion prompt.
PROMPT = "The capital of France is"


def completion_stream(url, body):
    """The objects of a streamed /completion, read as llama.cpp's clients read them (its web UI's completion.js,
    its server tests' utils.py): `data: ` lines of JSON, until the one with `stop: true`."""
    request = urllib.request.Request(url + "/completion", data=json.dumps({**body, "stream": True}).encode(),
                                     headers={"Content-Type": "application/json"})
    objects = []
    with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream"), response.headers["Content-Type"]
        for raw in response:
            line = raw.decode().rstrip("\n")
            if not line.startswith("data: "):
                assert line == "", line  # events are separated by blank lines, nothing else
                continue
            assert line != "data: [DONE]", "llama-server's stream has no [DONE]"
            objects.append(json.loads(line[len("data: "):]))
            if objects[-1]["stop"]:
                break
        assert response.read().strip() == b"", "nothing follows the final object (but its blank line)"
    return objects


class LlamaServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gateway = Gateway()

    @classmethod
    def tearDownClass(cls):
        assert cls.gateway.stop() == 0, cls.gateway.stderr()

    def post(self, path, body):
        return self.gateway.post_json(path, body)

    def refusal(self, path, body):
        """The status and error object of a refused request."""
        request = urllib.request.Request(self.gateway.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=PATIENCE_S)
        return caught.exception.code, json.load(caught.exception)["error"]

    def test_completion_whole_streamed_and_openais_agree(self):
        body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": True}
        whole = self.post("/completion", body)
        openai = self.gateway.client.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0)
        self.assertEqual(whole["content"], openai.choices[0].text)
        self.assertEqual(whole["tokens_evaluated"], openai.usage.prompt_tokens)
        self.assertEqual(whole["tokens_predicted"], openai.usage.completion_tokens)
        self.assertEqual(len(whole["tokens"]), whole["tokens_predicted"])
        self.assertTrue(whole["stop"])
        self.assertIn(whole["stop_type"], ("eos", "limit"))
        self.assertEqual(whole["generation_settings"]["n_predict"], 12)
        self.assertEqual(self.post("/completions", body)["content"], whole["content"], "/completions is an alias")

        objects = completion_stream(self.gateway.url, body)
        *partials, last = objects
        self.assertGreater(len(partials), 1)
        self.assertTrue(all(not p["stop"] for p in partials))
        self.assertEqual("".join(p["content"] for p in partials), whole["content"])
        self.assertEqual([t for p in partials for t in p["tokens"]], whole["tokens"])
        self.assertEqual((last["content"], last["tokens"]), ("", []))
        for field in ("tokens_predicted", "tokens_evaluated", "stop_type", "stopping_word", "prompt", "truncated"):
            self.assertEqual(last[field], whole[field], field)

    def test_n_probs_and_stop_words(self):
        whole = self.post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "n_probs": 2})
        probs = whole["completion_probabilities"]
        self.assertGreater(len(probs), 0)
        for p in probs:
            self.assertEqual(set(p), {"id", "token", "bytes", "logprob", "top_logprobs"})
            self.assertEqual(len(p["top_logprobs"]), 2)
            self.assertEqual(p["top_logprobs"][0]["id"], p["id"], "greedy takes the most likely token")
        self.assertEqual(bytes(b for p in probs for b in p["bytes"]).decode(), whole["content"])

        word = whole["content"].split()[1]
        stopped = self.post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stop": [word]})
        self.assertEqual((stopped["stop_type"], stopped["stopping_word"]), ("word", word))
        self.assertEqual(stopped["content"], whole["content"][:whole["content"].index(word)])

    def test_refusals_name_the_field(self):
        for body, field in (({"prompt": PROMPT, "mirostat": 2}, "mirostat"),
                            ({"prompt": PROMPT, "grammar": 'root ::= "a"'}, "grammar"),
                            ({"prompt": PROMPT, "n_probs": 99}, "n_probs")):
            status, error = self.refusal("/completion", body)
            self.assertEqual((status, error["param"]), (400, field), error)
            self.assertIn(field, error["message"])

    def test_tokenize_with_pieces_and_detokenize(self):
        text = "Hello 漢字"
        tokens = self.post("/tokenize", {"content": text})["tokens"]
        self.assertTrue(all(isinstance(t, int) for t in tokens))
        pieces = self.post("/tokenize", {"content": text, "with_pieces": True})["tokens"]
        self.assertEqual([p["id"] for p in pieces], tokens)
        joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
        self.assertEqual(joined.decode(), text)
        self.assertTrue(any(isinstance(p["piece"], list) for p in pieces), "a character split across tokens")
        self.assertEqual(self.post("/detokenize", {"tokens": tokens})["content"], text)
        # vLLM's shape is still vLLM's.
        vllm = self.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        self.assertEqual((vllm["tokens"], vllm["count"]), (tokens, len(tokens)))
        self.assertEqual(self.post("/detokenize", {"tokens": tokens})["prompt"], text)

    def test_props_slots_and_health(self):
        props = self.gateway.get_json("/props")
        models = self.gateway.get_json("/v1/models")
        settings = props["default_generation_settings"]
        self.assertEqual(settings["n_ctx"], models["data"][0]["max_model_len"])
        self.assertEqual(settings["params"]["temperature"], 0.800000011920929)
        self.assertEqual(settings["params"]["n_predict"], -1)
        self.assertGreater(props["total_slots"], 0)
        self.assertTrue(props["model_path"].endswith(".gguf"))
        self.assertIn("im_start", props["chat_template"])
        self.assertEqual(props["modalities"], {"vision": False, "audio": False})
        slots = self.gateway.get_json("/slots")
        self.assertEqual(len(slots), props["total_slots"])
        self.assertEqual([s["id"] for s in slots], list(range(len(slots))))
        self.assertFalse(any(s["is_processing"] for s in slots), "nothing runs now")
        self.assertEqual(self.gateway.get_json("/health")["status"], "ok")


OLLAMA_GREEDY = {"temperature": 0, "num_predict": 12}
OLLAMA_QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
      city: The city's name

    Returns:
      str: The weather there
    """
    return f"sunny in {city}"


class OllamaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gateway = Gateway()
        cls.ollama = ollama.Client(host=cls.gateway.url, timeout=PATIENCE_S)

    @classmethod
    def tearDownClass(cls):
        cls.ollama.close()
        assert cls.gateway.stop() == 0, cls.gateway.stderr()

    def check_done(self, response):
        """The last object: done, an Ollama done_reason, durations in nanoseconds that add up, the counts."""
        self.assertTrue(response.done)
        self.assertIn(response.done_reason, ("stop", "length"))
        for name in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
            self.assertIsInstance(response[name], int, name)
            self.assertGreaterEqual(response[name], 0, name)
        self.assertGreaterEqual(response.total_duration, response.prompt_eval_duration + response.eval_duration)
        self.assertGreater(response.prompt_eval_count, 0)
        self.assertGreater(response.eval_count, 0)

    def test_chat_whole_streamed_and_openais_agree(self):
        whole = self.ollama.chat(model=MODEL_ID, messages=OLLAMA_QUESTION, options=OLLAMA_GREEDY)
        self.assertEqual(whole.message.role, "assistant")
        self.assertEqual(whole.model, MODEL_ID)
        self.check_done(whole)
        openai = self.gateway.client.chat.completions.create(model=MODEL_ID, messages=OLLAMA_QUESTION, max_tokens=12,
                                                             temperature=0)
        self.assertEqual(whole.message.content, openai.choices[0].message.content)
        self.assertEqual(whole.prompt_eval_count, openai.usage.prompt_tokens)
        self.assertEqual(whole.eval_count, openai.usage.completion_tokens)

        parts = list(self.ollama.chat(model=MODEL_ID, messages=OLLAMA_QUESTION, options=OLLAMA_GREEDY, stream=True))
        self.assertGreater(len(parts), 2)
        self.assertTrue(all(not p.done for p in parts[:-1]))
        self.assertEqual("".join(p.message.content for p in parts), whole.message.content)
        self.check_done(parts[-1])

    def test_generate_templated_and_raw(self):
        templated = self.ollama.generate(model=MODEL_ID, prompt="What is the capital of France?", options=OLLAMA_GREEDY)
        chat = self.ollama.chat(model=MODEL_ID, messages=OLLAMA_QUESTION, options=OLLAMA_GREEDY)
        self.assertEqual(templated.response, chat.message.content)
        self.check_done(templated)

        prompt = "The capital of France is"
        raw = self.ollama.generate(model=MODEL_ID, prompt=prompt, raw=True, options=OLLAMA_GREEDY)
        completion = self.gateway.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12,
                                                            temperature=0)
        self.assertEqual(raw.response, completion.choices[0].text)
        streamed = list(self.ollama.generate(model=MODEL_ID, prompt=prompt, raw=True, options=OLLAMA_GREEDY, stream=True))
        self.assertEqual("".join(p.response for p in streamed), raw.response)
        self.check_done(streamed[-1])

    def test_format_json_and_a_pydantic_schema(self):
        class Answer(pydantic.BaseModel):
            model_config = pydantic.ConfigDict(extra="forbid")  # additionalProperties: false
            answer: int

        response = self.ollama.chat(model=MODEL_ID, messages=[{"role": "user", "content": "What is 7 times 8?"}],
                                    format=Answer.model_json_schema(), options={"temperature": 0, "num_predict": 40})
        self.assertIsInstance(Answer.model_validate_json(response.message.content).answer, int)
        response = self.ollama.generate(model=MODEL_ID, prompt="Describe a cat as JSON.", format="json",
                                        options={"temperature": 0, "num_predict": 48})
        if response.done_reason == "stop":
            self.assertIsInstance(json.loads(response.response), dict)

    def test_a_python_function_as_a_tool(self):
        # SmolLM2-135M calls a tool (Ollama has no tool_choice: the model decides) once two earlier turns showed
        # it how; they go in as the client writes them.
        messages = []
        for city, weather in [("London", "rainy"), ("Berlin", "sunny")]:
            messages += [
                {"role": "user", "content": f"What is the weather in {city}?"},
                ollama.Message(role="assistant", tool_calls=[ollama.Message.ToolCall(
                    function=ollama.Message.ToolCall.Function(name="get_weather", arguments={"city": city}))]),
                {"role": "tool", "content": weather, "tool_name": "get_weather"},
                {"role": "assistant", "content": f"It is {weather} in {city}."},
            ]
        messages.append({"role": "user", "content": "And in Paris?"})
        options = {"temperature": 0, "num_predict": 64}
        response = self.ollama.chat(model=MODEL_ID, messages=messages, tools=[get_weather], options=options)
        calls = response.message.tool_calls
        self.assertTrue(calls, response)
        self.assertEqual(calls[0].function.name, "get_weather")
        self.assertEqual(dict(calls[0].function.arguments), {"city": "Paris"})
        self.assertEqual(response.done_reason, "stop")
        streamed = list(self.ollama.chat(model=MODEL_ID, messages=messages, tools=[get_weather], options=options,
                                         stream=True))
        streamed_calls = [c for p in streamed for c in (p.message.tool_calls or [])]
        self.assertEqual([(c.function.name, dict(c.function.arguments)) for c in streamed_calls],
                         [(c.function.name, dict(c.function.arguments)) for c in calls])
        # The call and the tool's answer go back, and the model answers.
        result = get_weather(**calls[0].function.arguments)
        answer = self.ollama.chat(model=MODEL_ID, tools=[get_weather], options=OLLAMA_GREEDY, messages=[
            *messages, response.message, {"role": "tool", "content": result, "tool_name": "get_weather"}])
        self.check_done(answer)

    def test_the_load_call_generates_nothing(self):
        loaded = self.ollama.generate(model=MODEL_ID)
        self.assertEqual((loaded.done, loaded.done_reason, loaded.response), (True, "load", ""))
        loaded = self.ollama.chat(model=MODEL_ID, messages=[])
        self.assertEqual((loaded.done, loaded.done_reason, loaded.message.content), (True, "load", ""))

    def test_list_show_ps_version_and_root(self):
        models = self.ollama.list().models
        self.assertEqual([m.model for m in models], [MODEL_ID])
        self.assertEqual(models[0].details.format, "gguf")
        self.assertGreater(models[0].size, 0)
        self.assertIsNotNone(models[0].modified_at)
        shown = self.ollama.show(MODEL_ID)
        self.assertIn("completion", shown.capabilities)
        self.assertIn("tools", shown.capabilities)
        self.assertTrue(shown.template)
        architecture = shown.modelinfo["general.architecture"]
        self.assertGreater(shown.modelinfo[f"{architecture}.context_length"], 0)
        with self.assertRaises(ollama.ResponseError) as refused:
            self.ollama.show("llama3.2")
        self.assertEqual(refused.exception.status_code, 404)
        running = self.ollama.ps().models
        self.assertEqual([m.model for m in running], [MODEL_ID])
        self.assertEqual(self.gateway.get_json("/api/version")["version"].count("."), 2)
        with urllib.request.urlopen(self.gateway.url + "/", timeout=PATIENCE_S) as root:
            self.assertEqual(root.read(), b"Ollama is running")

    def test_refusals_are_response_errors_naming_the_field(self):
        for call, field in [
            (lambda: self.ollama.chat(model=MODEL_ID, messages=OLLAMA_QUESTION, options={"mirostat": 2}), "options.mirostat"),
            (lambda: self.ollama.generate(model=MODEL_ID, prompt="hi", images=[b"\x89PNG"]), "images"),
            (lambda: self.ollama.chat(model=MODEL_ID, messages=OLLAMA_QUESTION, think=True), "think"),
            (lambda: list(self.ollama.chat(model=MODEL_ID, messages=OLLAMA_QUESTION, stream=True,
                                           options={"temperature": 5})), "options.temperature"),
        ]:
            with self.assertRaises(ollama.ResponseError) as refused:
                call()
            self.assertEqual(refused.exception.status_code, 400, field)
            self.assertIn(field, refused.exception.error)

if __name__ == "__main__":
    unittest.main(verbosity=2)
