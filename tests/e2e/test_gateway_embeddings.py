#!/usr/bin/env python3
"""End-to-end test of examples/gateway's embeddings with the official OpenAI Python client (`pip install openai`).

Writes a synthetic bge-small encoder (two layers, 384-wide vectors, llama.cpp's real BERT vocabulary) with
`ember-cli synthetic` into a temporary directory, starts the built gateway on it (--listen 127.0.0.1:0; it prints its
address), and checks what an OpenAI client sees from `client.embeddings.create`: float vectors, the base64 the client
asks for by default and decodes, and base64 asked for explicitly; count, width and unit length; LangChain-style
batches of 1 and of 2,048 short texts in one call (the most one request takes), token-id inputs, refusals as
`BadRequestError`; and that the generation endpoints and /v1/rerank refuse the encoder while /v1/models lists it.
Ollama's /api/embed answers the same vectors.

    EMBER_GATEWAY=target/go/ember-gateway EMBER_CLI=target/release/ember-cli \
        python3 tests/e2e/test_gateway_embeddings.py   (`make go-test` builds both and runs this)

Environment: EMBER_GATEWAY (default target/go/ember-gateway), EMBER_CLI (default target/release/ember-cli),
EMBER_LLAMACPP_VOCABS (default .cache/llamacpp/vocab; `make vocabs` fetches it), all relative to the repository root.
"""

import array
import base64
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

import openai

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GATEWAY = os.path.join(ROOT, os.environ.get("EMBER_GATEWAY", "target/go/ember-gateway"))
EMBER_CLI = os.path.join(ROOT, os.environ.get("EMBER_CLI", "target/release/ember-cli"))
VOCABS = os.path.join(ROOT, os.environ.get("EMBER_LLAMACPP_VOCABS", ".cache/llamacpp/vocab"))
# The gateway names the model after its file, without the extension.
MODEL_ID = "bge-small-synthetic"
WIDTH = 384  # bge-small's hidden size
MAX_INPUTS = 2048  # the most inputs one request takes (OpenAI's bound too)
# Bound on waiting for the gateway to do something (start, answer); never a measured duration.
PATIENCE_S = 120

workdir = None
gateway = None
log = None
url = None
client = None


def setUpModule():
    global workdir, gateway, log, url, client
    for path, advice in ((GATEWAY, "build it with `make gateway` or set EMBER_GATEWAY"),
                         (EMBER_CLI, "build it with `cargo build --release --bin ember-cli` or set EMBER_CLI")):
        if not os.path.exists(path):
            raise RuntimeError(f"no {os.path.basename(path)} at {path}: {advice}")
    workdir = tempfile.mkdtemp(prefix="ember-e2e-embed-")
    model = os.path.join(workdir, MODEL_ID + ".gguf")
    subprocess.run([EMBER_CLI, "synthetic", model, "--family", "bge-small", "--layers", "2", "--seed", "1",
                    "--vocab", os.path.join(VOCABS, "ggml-vocab-bert-bge.gguf")], check=True, capture_output=True)
    log = tempfile.TemporaryFile()
    gateway = subprocess.Popen([GATEWAY, "--listen", "127.0.0.1:0", "--threads", "2", "--model", model],
                               stdout=subprocess.PIPE, stderr=log, text=True)
    selector = selectors.DefaultSelector()
    selector.register(gateway.stdout, selectors.EVENT_READ)
    line = gateway.stdout.readline() if selector.select(timeout=PATIENCE_S) else ""
    if "listening on " not in line:
        gateway.kill()
        raise RuntimeError(f"the gateway did not start ({line!r}):\n" + stderr())
    url = line.split("listening on ", 1)[1].strip()
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=PATIENCE_S)


def tearDownModule():
    try:
        if gateway is not None:
            gateway.send_signal(signal.SIGTERM)
            status = gateway.wait(timeout=PATIENCE_S)
            gateway.stdout.close()
            assert status == 0, f"gateway exited with {status}:\n{stderr()}"
    finally:
        if log is not None:
            log.close()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)


def stderr():
    log.seek(0)
    return log.read().decode(errors="replace")


def norm(vector):
    return math.sqrt(sum(x * x for x in vector))


def from_base64(text):
    """A vector of encoding_format "base64": its little-endian float32 bytes."""
    values = array.array("f", base64.b64decode(text))
    assert values.itemsize == 4
    return values.tolist()


class EmbeddingsTest(unittest.TestCase):
    def check_vectors(self, response, count, width=WIDTH):
        self.assertEqual(response.object, "list")
        self.assertEqual(response.model, MODEL_ID)
        self.assertEqual(len(response.data), count)
        self.assertEqual([d.index for d in response.data], list(range(count)))
        for datum in response.data:
            self.assertEqual(datum.object, "embedding")
            self.assertEqual(len(datum.embedding), width)
            self.assertAlmostEqual(norm(datum.embedding), 1.0, delta=1e-5)
        self.assertGreaterEqual(response.usage.prompt_tokens, 3 * count)  # [CLS] text [SEP]
        self.assertEqual(response.usage.total_tokens, response.usage.prompt_tokens)

    def test_float_default_and_base64_give_the_same_vectors(self):
        texts = ["The quick brown fox jumps over the lazy dog.", "Embeddings from ember's gateway"]
        floats = client.embeddings.create(model=MODEL_ID, input=texts, encoding_format="float")
        self.check_vectors(floats, 2)
        # Without encoding_format the client asks for base64 and decodes it into floats itself.
        default = client.embeddings.create(model=MODEL_ID, input=texts)
        self.check_vectors(default, 2)
        # Asked for explicitly, base64 reaches the caller as it is.
        explicit = client.embeddings.create(model=MODEL_ID, input=texts, encoding_format="base64")
        for f, d, e in zip(floats.data, default.data, explicit.data):
            self.assertIsInstance(e.embedding, str)
            # Each JSON number is its float32's shortest text: the same bits by every route.
            self.assertEqual(array.array("f", f.embedding).tolist(), d.embedding)
            self.assertEqual(from_base64(e.embedding), d.embedding)
        self.assertNotEqual(floats.data[0].embedding[:4], floats.data[1].embedding[:4])
        self.assertEqual(floats.usage.prompt_tokens, default.usage.prompt_tokens)

    def test_a_string_token_ids_and_dimensions(self):
        self.check_vectors(client.embeddings.create(model=MODEL_ID, input="a single string"), 1)
        # LangChain's OpenAIEmbeddings sends token ids (tiktoken's, by default): ids within the vocabulary.
        ids = client.embeddings.create(model=MODEL_ID, input=[[101, 7592, 2088, 102], [101, 2023, 102]])
        self.check_vectors(ids, 2)
        self.assertEqual(ids.usage.prompt_tokens, 7)
        short = client.embeddings.create(model=MODEL_ID, input=["Matryoshka"], dimensions=128)
        self.check_vectors(short, 1, width=128)

    def test_langchain_batches_of_1_and_2048(self):
        one = client.embeddings.create(model=MODEL_ID, input=["hello"], encoding_format="float")
        self.check_vectors(one, 1)
        texts = [f"document {i}: a short text" for i in range(MAX_INPUTS)]
        batch = client.embeddings.create(model=MODEL_ID, input=texts, encoding_format="float")
        self.check_vectors(batch, MAX_INPUTS)
        # An input's vector does not depend on the batch it was computed in.
        for i in (0, 777, MAX_INPUTS - 1):
            alone = client.embeddings.create(model=MODEL_ID, input=[texts[i]], encoding_format="float")
            self.assertEqual(alone.data[0].embedding, batch.data[i].embedding)
        with self.assertRaises(openai.BadRequestError) as refused:
            client.embeddings.create(model=MODEL_ID, input=texts + ["one too many"])
        self.assertIn("2048", refused.exception.message)

    def test_refusals_are_bad_requests(self):
        for kwargs, param in (({"input": []}, "input"), ({"input": "a", "dimensions": 1000}, "dimensions"),
                              ({"input": "word " * 600}, "input[0]")):
            with self.assertRaises(openai.BadRequestError) as refused:
                client.embeddings.create(model=MODEL_ID, **kwargs)
            self.assertEqual(refused.exception.status_code, 400)
            self.assertEqual(refused.exception.param, param)
            self.assertEqual(refused.exception.type, "invalid_request_error")

    def test_the_encoder_does_not_generate_and_is_listed(self):
        with self.assertRaises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        self.assertIn("serves embeddings", refused.exception.message)
        with self.assertRaises(openai.BadRequestError):
            client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=2)
        self.assertEqual([m.id for m in client.models.list()], [MODEL_ID])

    def test_an_embedding_model_does_not_rerank(self):
        # No classification head: the engine's refusal, a 400 (tests/e2e/test_gateway_rerank.py ranks).
        body = json.dumps({"query": "q", "documents": ["a", "b"]}).encode()
        request = urllib.request.Request(url + "/v1/rerank", data=body, headers={"Content-Type": "application/json"})
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=PATIENCE_S)
        with refused.exception as response:
            self.assertEqual(response.code, 400)
            error = json.load(response)["error"]
        self.assertEqual(error["type"], "invalid_request_error")
        self.assertIn("rank", error["message"])
        self.assertFalse(error["message"].startswith("engine_"))

    def test_ollama_embed_gives_the_same_vectors(self):
        texts = ["Why is the sky blue?", "Why is the grass green?"]
        body = json.dumps({"model": MODEL_ID, "input": texts}).encode()
        request = urllib.request.Request(url + "/api/embed", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
            ollama = json.load(response)
        openai_vectors = client.embeddings.create(model=MODEL_ID, input=texts, encoding_format="float")
        self.assertEqual(ollama["model"], MODEL_ID)
        self.assertEqual(ollama["embeddings"], [d.embedding for d in openai_vectors.data])
        self.assertEqual(ollama["prompt_eval_count"], openai_vectors.usage.prompt_tokens)
        self.assertGreater(ollama["total_duration"], 0)
        self.assertEqual(ollama["load_duration"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
