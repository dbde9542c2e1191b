#!/usr/bin/env python3
"""Writes tests/fixtures/reference_logits.{json,f32}: float64-reference logits of SmolLM2-135M-Instruct Q4_1 at
every prompt position of a few reference chat prompts, for ember's forward-pass tests (CPU precise path ≤ 1e-3
relative error; GPU path median ≤ 0.05).

Full logits rows (49,152 floats per position) would make a 30 MB fixture, so each position stores a fixed,
seeded random subset of 1,024 vocabulary entries (the same for all positions) plus that position's 64 largest
reference logits. The relative error ‖ours − ref‖ / ‖ref‖ over these 1,088 entries estimates the full-row error.

  pip install gguf numpy
  python3 scripts/reference/make_reference_logits.py models/SmolLM2-135M-Instruct.Q4_1.gguf tests/fixtures

Layout of the .f32: for each case, for each position: 1,024 subset logits then 64 top logits, all float32 LE.
The .json says which cases, ids and indices.
"""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from reference_forward import load, forward  # noqa: E402

CASES = [7, 0, 5, 2]  # indices into greedy_ref.json: 'hi', capital of France, count to 20, Python prime
SUBSET, TOP, SEED = 1024, 64, 20261129


def main():
    model, out_dir = sys.argv[1], sys.argv[2]
    ref = json.load(open(os.path.join(out_dir, "greedy_ref.json")))
    hp, w = load(model)
    vocab = w["token_embd.weight"].shape[0]
    subset = np.sort(np.random.default_rng(SEED).choice(vocab, SUBSET, replace=False))
    meta = {"model_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "subset": subset.tolist(), "top": TOP, "cases": []}
    blob = bytearray()
    for c in CASES:
        ids = ref["cases"][c]["prompt_ids"]
        logits = forward(hp, w, np.array(ids))
        tops = []
        for row in logits:
            top = np.argsort(-row)[:TOP]
            blob += row[subset].astype("<f4").tobytes() + row[top].astype("<f4").tobytes()
            tops.append(top.tolist())
        meta["cases"].append({"greedy_ref_case": c, "prompt_ids": ids, "top_ids": tops})
        print(f"case {c}: {len(ids)} positions", file=sys.stderr)
    with open(os.path.join(out_dir, "reference_logits.json"), "w") as f:
        json.dump(meta, f, separators=(",", ":"))
    with open(os.path.join(out_dir, "reference_logits.f32"), "wb") as f:
        f.write(blob)


if __name__ == "__main__":
    main()
