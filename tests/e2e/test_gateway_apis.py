#!/usr/bin/env python3
"""End-to-end tests of examples/gateway's other APIs, each driven by its official client.

OllamaTest: Ollama's API with the `ollama` Python client (`pip install ollama`): chat and generate, whole and
streamed, their durations, `format` (json and a pydantic schema), a Python function as a tool, the load call,
list/show/ps, `/api/version` and `/`, and refusals as `ollama.ResponseError`.

    EMBER_GATEWAY=target/go/ember-gateway python3 tests/e2e/test_gateway_apis.py   (`make go-test` runs this)

Environment: as tests/e2e/test_gateway.py (EMBER_GATEWAY, EMBER_MODEL), whose Gateway starts the gateway. Requests
are greedy (`temperature` 0: Ollama's default is 0.8) and short.
"""

import json
import os
import sys
import unittest
import urllib.request

import ollama
import pydantic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gateway import MODEL_ID, PATIENCE_S, Gateway  # noqa: E402

GREEDY = {"temperature": 0, "num_predict": 12}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


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
        whole = self.ollama.chat(model=MODEL_ID, messages=QUESTION, options=GREEDY)
        self.assertEqual(whole.message.role, "assistant")
        self.assertEqual(whole.model, MODEL_ID)
        self.check_done(whole)
        openai = self.gateway.client.chat.completions.create(model=MODEL_ID, messages=QUESTION, max_tokens=12,
                                                             temperature=0)
        self.assertEqual(whole.message.content, openai.choices[0].message.content)
        self.assertEqual(whole.prompt_eval_count, openai.usage.prompt_tokens)
        self.assertEqual(whole.eval_count, openai.usage.completion_tokens)

        parts = list(self.ollama.chat(model=MODEL_ID, messages=QUESTION, options=GREEDY, stream=True))
        self.assertGreater(len(parts), 2)
        self.assertTrue(all(not p.done for p in parts[:-1]))
        self.assertEqual("".join(p.message.content for p in parts), whole.message.content)
        self.check_done(parts[-1])

    def test_generate_templated_and_raw(self):
        templated = self.ollama.generate(model=MODEL_ID, prompt="What is the capital of France?", options=GREEDY)
        chat = self.ollama.chat(model=MODEL_ID, messages=QUESTION, options=GREEDY)
        self.assertEqual(templated.response, chat.message.content)
        self.check_done(templated)

        prompt = "The capital of France is"
        raw = self.ollama.generate(model=MODEL_ID, prompt=prompt, raw=True, options=GREEDY)
        completion = self.gateway.client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12,
                                                            temperature=0)
        self.assertEqual(raw.response, completion.choices[0].text)
        streamed = list(self.ollama.generate(model=MODEL_ID, prompt=prompt, raw=True, options=GREEDY, stream=True))
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
        answer = self.ollama.chat(model=MODEL_ID, tools=[get_weather], options=GREEDY, messages=[
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
            (lambda: self.ollama.chat(model=MODEL_ID, messages=QUESTION, options={"mirostat": 2}), "options.mirostat"),
            (lambda: self.ollama.generate(model=MODEL_ID, prompt="hi", images=[b"\x89PNG"]), "images"),
            (lambda: self.ollama.chat(model=MODEL_ID, messages=QUESTION, think=True), "think"),
            (lambda: list(self.ollama.chat(model=MODEL_ID, messages=QUESTION, stream=True,
                                           options={"temperature": 5})), "options.temperature"),
        ]:
            with self.assertRaises(ollama.ResponseError) as refused:
                call()
            self.assertEqual(refused.exception.status_code, 400, field)
            self.assertIn(field, refused.exception.error)


if __name__ == "__main__":
    unittest.main()
