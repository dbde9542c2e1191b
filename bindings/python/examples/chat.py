"""Streams a chat answer from the default model and prints the request's five timing metrics.

    python examples/chat.py "What is the boiling point of water in Celsius?"
"""

import sys
from pathlib import Path

import ember

model = Path(__file__).resolve().parents[3] / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
question = sys.argv[1] if len(sys.argv) > 1 else "What is the boiling point of water in Celsius?"

with ember.Engine({"model": model, "threads": 2}) as engine:
    request = engine.submit({"messages": [{"role": "user", "content": question}], "max_tokens": 64})
    for event in request:
        print(event.text, end="", flush=True)
    print()
    for name, value in vars(request.timing_metrics()).items():
        print(f"{name:>24}: {value:.2f}" if value is not None else f"{name:>24}: absent")
