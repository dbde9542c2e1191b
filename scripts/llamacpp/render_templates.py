#!/usr/bin/env python3
"""Writes tests/fixtures/templates/expected.json: every llama.cpp template (scripts/llamacpp/fetch-templates.sh)
rendered with every conversation of tests/fixtures/templates/conversations.json by Hugging Face transformers'
own renderer (`render_jinja_template`, what `apply_chat_template` calls), with the clock fixed.

tests/chat_templates_llamacpp.rs renders the same with ember and compares. Needs transformers (no torch) and
jinja2 >= 3.1.6 in a virtual environment, for example:

    python3 -m venv /tmp/hf && /tmp/hf/bin/pip install transformers==5.25.0 jinja2==3.1.6
    /tmp/hf/bin/python scripts/llamacpp/render_templates.py "$(scripts/llamacpp/fetch-templates.sh)"

Each template gets {"sha256": its file's, "renders": {conversation: {"text": ...} or {"error": ...}}}. An error is
what transformers raised (the template's raise_exception, usually: Gemma 2 has no system role).
"""
import datetime as real_datetime
import hashlib
import json
import pathlib
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "templates"


def fixed_clock(unix_seconds):
    """transformers' strftime_now reads `datetime.now()` from its module; this one always answers the same UTC
    time, as ember's template test fixes its clock."""
    fixed = real_datetime.datetime.fromtimestamp(unix_seconds, real_datetime.timezone.utc).replace(tzinfo=None)

    class FixedDatetime(real_datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed

    return FixedDatetime


def render(template, conversation, spec):
    kwargs = {"bos_token": spec["bos_token"], "eos_token": spec["eos_token"]}
    tools = spec["tools"] if conversation.get("tools") else None
    try:
        rendered, _ = chat_template_utils.render_jinja_template(
            conversations=[conversation["messages"]],
            tools=tools,
            chat_template=template,
            add_generation_prompt=conversation["add_generation_prompt"],
            **kwargs,
        )
        return {"text": rendered[0]}
    except Exception as e:  # the template's own refusal, or a construct jinja2 rejects
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    templates = pathlib.Path(sys.argv[1])
    spec = json.loads((FIXTURES / "conversations.json").read_text())
    chat_template_utils.datetime = fixed_clock(spec["unix_seconds"])
    out = {
        "about": "Written by scripts/llamacpp/render_templates.py from llama.cpp's models/templates (llama-cpp-python "
        "0.3.36 sdist) and conversations.json; do not edit.",
        "renderer": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}",
        "templates": {},
    }
    for path in sorted(templates.glob("*.jinja")):
        source = path.read_text()
        renders = {c["name"]: render(source, c, spec) for c in spec["conversations"]}
        out["templates"][path.stem] = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "renders": renders}
    (FIXTURES / "expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    total = sum(len(t["renders"]) for t in out["templates"].values())
    errors = sum("error" in r for t in out["templates"].values() for r in t["renders"].values())
    print(f"{len(out['templates'])} templates, {total} renders, {errors} refused by the template", file=sys.stderr)


if __name__ == "__main__":
    main()
