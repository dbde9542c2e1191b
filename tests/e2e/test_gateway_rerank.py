#!/usr/bin/env python3
"""End-to-end test of examples/gateway's POST /v1/rerank over plain HTTP (the standard library's urllib: the OpenAI
client has no rerank call).

Writes a synthetic reranker (bge-small's two layers and a cross-encoder's classification head, llama.cpp's real
BERT vocabulary) with `ember-cli synthetic` into a temporary directory, starts the built gateway on it
(--listen 127.0.0.1:0; it prints its address), and checks what a client of llama-server's, vLLM's, Jina's or
Cohere's rerank API sees: one query against 100 documents ranked by score, most relevant first, every document
once; each score the same as its document's alone; `top_n`; `return_documents` with strings and {"text"} objects;
llama-server's other paths; refusals as OpenAI errors naming their field; the reranker's refusal of embeddings.
tests/e2e/test_gateway_embeddings.py checks that an embedding model refuses to rerank.

    EMBER_GATEWAY=target/go/ember-gateway EMBER_CLI=target/release/ember-cli \\
        python3 tests/e2e/test_gateway_rerank.py   (`make go-test` builds both and runs this)

Environment: EMBER_GATEWAY (default target/go/ember-gateway), EMBER_CLI (default target/release/ember-cli),
EMBER_LLAMACPP_VOCABS (default .cache/llamacpp/vocab; `make vocabs` fetches it), all relative to the repository root.
"""

import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GATEWAY = os.path.join(ROOT, os.environ.get("EMBER_GATEWAY", "target/go/ember-gateway"))
EMBER_CLI = os.path.join(ROOT, os.environ.get("EMBER_CLI", "target/release/ember-cli"))
VOCABS = os.path.join(ROOT, os.environ.get("EMBER_LLAMACPP_VOCABS", ".cache/llamacpp/vocab"))
# The gateway names the model after its file, without the extension.
MODEL_ID = "bge-small-rerank-synthetic"
# Bound on waiting for the gateway to do something (start, answer); never a measured duration.
PATIENCE_S = 120

QUERY = "What is the capital of France?"
# 100 documents, some about the query and most not, of various lengths.
TOPICS = ["Paris is the capital of France", "Berlin is the capital of Germany", "the quick brown fox",
          "France is a country in Western Europe", "capital letters start sentences", "the Eiffel Tower in Paris",
          "a recipe for bread", "rivers of Europe", "venture capital and start-ups", "x"]
DOCUMENTS = [f"{TOPICS[i % len(TOPICS)]} ({'more words, ' * (i // len(TOPICS))}document {i})." for i in range(100)]

workdir = None
gateway = None
log = None
url = None


def setUpModule():
    global workdir, gateway, log, url
    for path, advice in ((GATEWAY, "build it with `make gateway` or set EMBER_GATEWAY"),
                         (EMBER_CLI, "build it with `cargo build --release --bin ember-cli` or set EMBER_CLI")):
        if not os.path.exists(path):
            raise RuntimeError(f"no {os.path.basename(path)} at {path}: {advice}")
    workdir = tempfile.mkdtemp(prefix="ember-e2e-rerank-")
    model = os.path.join(workdir, MODEL_ID + ".gguf")
    subprocess.run([EMBER_CLI, "synthetic", model, "--family", "bge-small-rerank", "--layers", "2", "--seed", "1",
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


def post(path, body):
    """(status, decoded JSON body) of a POST; an HTTP error's body too."""
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


def rerank(**body):
    status, answer = post("/v1/rerank", body)
    assert status == 200, (status, answer)
    return answer


class RerankTest(unittest.TestCase):
    def test_a_hundred_documents_ranked_by_score(self):
        answer = rerank(model="any", query=QUERY, documents=DOCUMENTS)
        self.assertEqual(answer["object"], "list")
        self.assertEqual(answer["model"], MODEL_ID)
        results = answer["results"]
        self.assertEqual(sorted(r["index"] for r in results), list(range(len(DOCUMENTS))))
        # Most relevant first; equal scores keep the documents' order.
        for before, after in zip(results, results[1:]):
            self.assertTrue(before["relevance_score"] > after["relevance_score"] or
                            (before["relevance_score"] == after["relevance_score"] and
                             before["index"] < after["index"]), (before, after))
        self.assertGreater(results[0]["relevance_score"], results[-1]["relevance_score"])
        self.assertTrue(all("document" not in r for r in results))
        # [CLS] query [SEP] document [SEP]: the query's 9 tokens and at least 4 of each document's (its number).
        usage = answer["usage"]
        self.assertGreaterEqual(usage["prompt_tokens"], 13 * len(DOCUMENTS))
        self.assertEqual(usage["total_tokens"], usage["prompt_tokens"])
        # A document's score does not depend on the others it was ranked with.
        scores = {r["index"]: r["relevance_score"] for r in results}
        for i in (0, 37, 99):
            alone = rerank(query=QUERY, documents=[DOCUMENTS[i]])["results"]
            self.assertEqual(alone, [{"index": 0, "relevance_score": scores[i]}])

    def test_top_n_and_return_documents(self):
        full = rerank(query=QUERY, documents=DOCUMENTS)["results"]
        best = rerank(query=QUERY, documents=DOCUMENTS, top_n=5, return_documents=True)["results"]
        self.assertEqual(len(best), 5)
        for got, want in zip(best, full):
            self.assertEqual((got["index"], got["relevance_score"]), (want["index"], want["relevance_score"]))
            self.assertEqual(got["document"], {"text": DOCUMENTS[got["index"]]})
        self.assertEqual(rerank(query=QUERY, documents=DOCUMENTS, top_n=1000)["results"], full)
        # Jina's and Cohere's documents as {"text"} objects; llama-server's other paths answer the same.
        objects = [{"text": d} for d in DOCUMENTS[:10]]
        expected = rerank(query=QUERY, documents=DOCUMENTS[:10], top_n=3)
        for path in ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking"):
            status, answer = post(path, {"query": QUERY, "documents": objects, "top_n": 3})
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer, expected, path)

    def test_refusals_are_openai_errors(self):
        for body, param in (({"documents": ["a"]}, "query"), ({"query": QUERY, "documents": []}, "documents"),
                            ({"query": QUERY, "documents": ["a"], "top_n": 0}, "top_n"),
                            ({"query": QUERY, "documents": ["a"], "rank_fields": ["text"]}, "rank_fields"),
                            ({"query": QUERY, "documents": ["a", "word " * 600]}, "documents[1]"),
                            ({"query": QUERY, "documents": ["a"] * 2049}, "documents")):
            status, answer = post("/v1/rerank", body)
            self.assertEqual(status, 400, answer)
            self.assertEqual(answer["error"]["type"], "invalid_request_error")
            self.assertEqual(answer["error"]["param"], param, answer)
        # A reranker gives vectors only when asked for a pooling of its encoder.
        status, answer = post("/v1/embeddings", {"input": "a"})
        self.assertEqual(status, 400, answer)
        self.assertIn("reranker", answer["error"]["message"])
        status, answer = post("/v1/embeddings", {"input": "a", "pooling": "cls"})
        self.assertEqual(status, 200, answer)
        self.assertEqual(len(answer["data"][0]["embedding"]), 384)


if __name__ == "__main__":
    unittest.main(verbosity=2)
