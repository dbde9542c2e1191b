#!/usr/bin/env python3
"""End-to-end tests of examples/gateway's other APIs, each driven as its own clients drive it.

LlamaServerTest: llama-server's own endpoints over plain HTTP (urllib), as the tools written for llama-server call
them: POST /completion whole and streamed (the stream read line by line as llama.cpp's own clients read it, until
the object with `stop: true`), `n_probs`, stop words, /tokenize with `content` and `with_pieces`, /detokenize,
GET /props, GET /slots and /health.

    EMBER_GATEWAY=target/go/ember-gateway python3 tests/e2e/test_gateway_apis.py   (`make go-test` runs this)

Environment: as tests/e2e/test_gateway.py (EMBER_GATEWAY, EMBER_MODEL), whose Gateway starts the gateway. Requests
are greedy (`temperature` 0: llama-server's default is 0.8) and short.
"""

import json
import os
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gateway import PATIENCE_S, Gateway  # noqa: E402

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


if __name__ == "__main__":
    unittest.main()
