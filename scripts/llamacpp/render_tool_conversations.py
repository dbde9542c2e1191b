#!/usr/bin/env python3
"""Writes tests/fixtures/templates/tool_expected.json: the tool conversations of
tests/fixtures/templates/tool_conversations.json rendered by every llama.cpp template (scripts/llamacpp/fetch-templates.sh)
and every tests/fixtures/*.jinja, with jinja2 set up as Hugging Face transformers sets it up for
`apply_chat_template` (an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, its
`tojson`, `raise_exception`, `strftime_now` and `{% generation %}`), the clock fixed.

tests/template_tool_conversations.rs sends the same conversations through ember's chat API and compares. Needs only
jinja2 (transformers' own renderer is this environment; scripts/llamacpp/render_templates.py uses transformers
itself, and running this one's environment on conversations.json gives its renders byte for byte):

    python3 -m pip install jinja2==3.1.6
    python3 scripts/llamacpp/render_tool_conversations.py "$(scripts/llamacpp/fetch-templates.sh)"

Each template gets:
- "sha256": its file's;
- "caps": what it renders of a system message, tools and a tool result, found with the probes ember uses
  (src/model/chat_template/caps.rs), here under jinja2;
- "renders": per conversation, "as_sent": the conversation as ember gives it to a template (an assistant turn's
  null content as "", each call's arguments as the object their JSON string encodes), rendered with the request's
  tools: {"text": ...} or {"error": ...}, what transformers would raise; and, for a template without a system role
  ("caps.system_role" false) whose conversation has a system message, "system_folded": the same with each system
  message's text at the start of the next user turn, joined by "\\n\\n", as ember and llama.cpp send it.
"""
import datetime
import hashlib
import json
import pathlib
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


class Generation(jinja2.ext.Extension):
    """transformers' `{% generation %}` tag (its AssistantTracker): the block renders its content."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_content"), [], [], body).set_lineno(lineno)

    def _content(self, caller):
        return caller()


def environment(unix_seconds):
    """transformers' `_compile_jinja_template` environment, `strftime_now` answering `unix_seconds` (UTC)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        now = datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc).replace(tzinfo=None)
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, messages, tools, bos_token, eos_token):
    """What transformers' `render_jinja_template` renders (with the generation prompt), or the error it raises."""
    try:
        text = template.render(
            messages=messages,
            tools=tools,
            documents=None,
            add_generation_prompt=True,
            bos_token=bos_token,
            eos_token=eos_token,
        )
        return {"text": text}
    except Exception as e:  # the template's own refusal, or a construct jinja2 rejects
        return {"error": f"{type(e).__name__}: {e}"}


# The probes of src/model/chat_template/caps.rs, with the same needles.
SYSTEM_NEEDLE = "ember_probe_system_text"
TOOL_NEEDLE = "ember_probe_tool_result"
TOOL_NAME_NEEDLE = "ember_probe_tool_name"
PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME_NEEDLE,
            "description": "A probe.",
            "parameters": {
                "type": "object",
                "properties": {"ember_probe": {"type": "integer", "description": "A number."}},
                "required": ["ember_probe"],
            },
        },
    }
]


def caps(template, bos_token, eos_token):
    def shows(messages, tools, needle):
        rendered = render(template, messages, tools, bos_token, eos_token)
        return needle in rendered.get("text", "")

    user = {"role": "user", "content": "Hello."}
    takes_a_user_turn = "text" in render(template, [user], None, bos_token, eos_token)
    system = [{"role": "system", "content": SYSTEM_NEEDLE}, user]
    renders_tools = shows([user], PROBE_TOOLS, TOOL_NAME_NEEDLE) or shows(
        [{"role": "system", "content": "Be brief."}, user], PROBE_TOOLS, TOOL_NAME_NEEDLE
    )
    result = {"role": "tool", "content": TOOL_NEEDLE, "tool_call_id": "probe0001"}
    return {
        "system_role": not takes_a_user_turn or shows(system, None, SYSTEM_NEEDLE),
        "renders_tools": renders_tools,
        "tool_role": shows([user, {"role": "assistant", "content": "Hi."}, result], None, TOOL_NEEDLE),
    }


def as_ember_gives_it(message):
    """A request's message as ember gives it to a template (src/protocol/prompt.rs, `parse_message`): its keys
    in ember's order (role, content, tool_calls, tool_call_id, the others), null content as "", each call's
    `arguments` as the object its JSON string encodes (a string that is not a JSON object stays a string)."""
    out = {"role": message["role"], "content": message.get("content") or ""}
    if "tool_calls" in message:
        calls = json.loads(json.dumps(message["tool_calls"]))
        for call in calls:
            try:
                arguments = json.loads(call["function"]["arguments"])
            except (TypeError, ValueError):
                continue
            if isinstance(arguments, dict):
                call["function"]["arguments"] = arguments
        out["tool_calls"] = calls
    if "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    for key, value in message.items():
        if key not in out and value is not None:
            out[key] = value
    return out


def system_folded(messages):
    """Each system message's text at the start of the next user turn, "\\n\\n" between
    (src/protocol/template_roles.rs); system text with no user turn after it becomes a user turn of its own."""
    out, pending = [], ""

    def joined(first, then):
        return then if not first else first if not then else f"{first}\n\n{then}"

    for m in messages:
        if m["role"] == "system":
            pending = joined(pending, m["content"])
        elif m["role"] == "user":
            out.append({**m, "content": joined(pending, m["content"])})
            pending = ""
        else:
            if pending:
                out.append({"role": "user", "content": pending})
                pending = ""
            out.append(m)
    if pending:
        out.append({"role": "user", "content": pending})
    return out


def templates(llamacpp_dir):
    """(name, path): llama.cpp's templates by their stem, the fixtures' as fixtures/NAME."""
    found = [(p.stem, p) for p in sorted(llamacpp_dir.glob("*.jinja"))]
    found += [(f"fixtures/{p.stem}", p) for p in sorted(FIXTURES.glob("*.jinja"))]
    return found


def main():
    llamacpp_dir = pathlib.Path(sys.argv[1])
    spec = json.loads((FIXTURES / "templates" / "tool_conversations.json").read_text())
    bos, eos = spec["bos_token"], spec["eos_token"]
    env = environment(spec["unix_seconds"])
    out = {
        "about": "Written by scripts/llamacpp/render_tool_conversations.py from llama.cpp's models/templates "
        "(llama-cpp-python 0.3.36 sdist), tests/fixtures/*.jinja and tool_conversations.json; do not edit.",
        "renderer": f"jinja2 {jinja2.__version__} set up as transformers' apply_chat_template",
        "templates": {},
    }
    for name, path in templates(llamacpp_dir):
        template = env.from_string(path.read_text())
        found = caps(template, bos, eos)
        renders = {}
        for conversation in spec["conversations"]:
            messages = [as_ember_gives_it(m) for m in conversation["messages"]]
            tools = [spec["tools"][t] for t in conversation["tools"]] or None
            entry = {"as_sent": render(template, messages, tools, bos, eos)}
            if not found["system_role"] and any(m["role"] == "system" for m in messages):
                entry["system_folded"] = render(template, system_folded(messages), tools, bos, eos)
            renders[conversation["name"]] = entry
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        out["templates"][name] = {"sha256": sha, "caps": found, "renders": renders}
    (FIXTURES / "templates" / "tool_expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    entries = [r for t in out["templates"].values() for r in t["renders"].values()]
    errors = sum("error" in r["as_sent"] for r in entries)
    print(f"{len(out['templates'])} templates, {len(entries)} conversations, {errors} refused as sent", file=sys.stderr)


if __name__ == "__main__":
    main()
