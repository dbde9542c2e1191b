#!/usr/bin/env python3
"""Embedding throughput and latency of an OpenAI-compatible server (ember's gateway, llama-server --embeddings).

  python3 scripts/bench-embeddings.py URL [URL...] [--texts 1000] [--batch 32] [--rounds 2] [--latency 20]
  python3 scripts/bench-embeddings.py URL [URL...] --rerank 100 [--queries 10] [--rounds 2]

For each server URL (e.g. http://127.0.0.1:8080), in turns (alternated, `--rounds` times): TEXTS texts of 16 to 256
words (deterministic; BERT's vocabulary makes about one token a word for these) sent as `POST /v1/embeddings` requests
of BATCH inputs one after another (as LangChain's `embed_documents` chunks them), then LATENCY requests of one
128-word input. Prints a JSON object per server and round: texts/s, tokens/s (the server's `usage`), and the single
input's median and p90 latency in ms. With `--rerank N`: QUERIES `POST /v1/rerank` requests (llama-server
`--reranking`'s and ember's shared shape), each one query and N candidate documents of 16 to 256 words, one after
another; prints documents/s, each request's median seconds, and the ranking's top document per query (so that the
servers' orders can be compared). Stdlib only.
"""
import json
import statistics
import sys
import time
import urllib.request

WORDS = ("the of and to in is was for on that with as by at from his her an were are which this be or have had "
         "not but one all their there been has when who will more no if out so what up its about into than them "
         "can only other new some could time these two may then do first any my now such like our over man me "
         "even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long "
         "get here between both life being under never day same another know while last might us great old year "
         "off come since against go came right used take three").split()


def texts(n):
    out = []
    for i in range(n):
        length = 16 + (i * 7919) % 241
        out.append(" ".join(WORDS[(i * 31 + k * 17) % len(WORDS)] for k in range(length)))
    return out


def post(url, inputs):
    body = json.dumps({"input": inputs, "model": "bench"}).encode()
    request = urllib.request.Request(url + "/v1/embeddings", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def run(url, corpus, batch, latency_n):
    started = time.perf_counter()
    tokens = 0
    for i in range(0, len(corpus), batch):
        reply = post(url, corpus[i:i + batch])
        assert len(reply["data"]) == len(corpus[i:i + batch])
        tokens += reply.get("usage", {}).get("prompt_tokens", 0)
    elapsed = time.perf_counter() - started
    single = " ".join(WORDS[k % len(WORDS)] for k in range(128))
    post(url, [single])
    latencies = []
    for _ in range(latency_n):
        t = time.perf_counter()
        post(url, [single])
        latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    return {"texts_per_s": round(len(corpus) / elapsed, 2), "tokens_per_s": round(tokens / elapsed, 1),
            "seconds": round(elapsed, 2), "prompt_tokens": tokens,
            "single_128_ms_p50": round(statistics.median(latencies), 2),
            "single_128_ms_p90": round(latencies[int(0.9 * (len(latencies) - 1))], 2)}


def rerank(url, corpus, candidates, queries):
    durations, tops, documents = [], [], 0
    for q in range(queries):
        docs = [corpus[(q * candidates + i) % len(corpus)] for i in range(candidates)]
        body = json.dumps({"query": " ".join(WORDS[(q * 13 + k) % len(WORDS)] for k in range(12)),
                           "documents": docs, "model": "bench"}).encode()
        request = urllib.request.Request(url + "/v1/rerank", body, {"Content-Type": "application/json"})
        t = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as response:
            reply = json.loads(response.read())
        durations.append(time.perf_counter() - t)
        results = reply["results"]
        assert len(results) == candidates, reply
        tops.append(max(results, key=lambda r: r["relevance_score"])["index"])
        documents += candidates
    return {"documents_per_s": round(documents / sum(durations), 1),
            "request_s_p50": round(statistics.median(durations), 3), "top_documents": tops}


def main():
    args = sys.argv[1:]
    opts = {"--texts": 1000, "--batch": 32, "--rounds": 2, "--latency": 20, "--rerank": 0, "--queries": 10}
    urls = []
    while args:
        a = args.pop(0)
        if a in opts:
            opts[a] = int(args.pop(0))
        else:
            urls.append(a.rstrip("/"))
    corpus = texts(opts["--texts"])
    for r in range(opts["--rounds"]):
        for url in urls:
            if opts["--rerank"]:
                result = rerank(url, corpus, opts["--rerank"], opts["--queries"])
            else:
                result = run(url, corpus, opts["--batch"], opts["--latency"])
            print(json.dumps({"url": url, "round": r, **result}), flush=True)


if __name__ == "__main__":
    main()
