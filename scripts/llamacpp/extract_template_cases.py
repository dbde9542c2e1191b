#!/usr/bin/env python3
"""Extracts the chat-template test cases of llama.cpp's tests/test-chat-template.cpp (main_automated_tests) into
JSON: each case's name, Jinja template, bos/eos texts, extra conversation turns and the output llama.cpp expects
from its Jinja engine (expected_output_jinja, else expected_output). Cases llama.cpp marks unsupported with Jinja
are left out. The conversation every case shares is written once.

Usage: extract_template_cases.py SDIST_TARBALL OUTPUT_JSON (the pinned llama-cpp-python sdist,
scripts/llamacpp/sdist.sh)."""
import json
import re
import sys
import tarfile

FIELDS = ["name", "template_str", "expected_output", "expected_output_jinja", "bos_token", "eos_token",
          "supported_with_jinja", "extra_conversation"]
TOKEN = re.compile(r'''\s*(?:(?P<comment>/\*.*?\*/|//[^\n]*)|(?P<u8c>U8C\()|(?P<str>(?:u8)?"(?:[^"\\]|\\.)*")|(?P<word>true|false)|(?P<punct>[{}(),]))''', re.S)
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def unescape(literal):
    body = literal[literal.index('"') + 1:-1]
    return re.sub(r"\\(.)", lambda m: ESCAPES[m.group(1)], body)


def tokens(text):
    pos = 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                return
            raise ValueError(f"unexpected text at {pos}: {text[pos:pos + 60]!r}")
        pos = m.end()
        if m.group("comment"):
            continue
        if m.group("u8c"):
            yield ("punct", "(")  # U8C("...") is the literal as UTF-8
            continue
        if m.group("str"):
            yield ("str", unescape(m.group("str")))
        elif m.group("word"):
            yield ("bool", m.group("word") == "true")
        else:
            yield ("punct", m.group("punct"))


def parse_value(toks):
    """A value: adjacent string literals (joined), a bool, or a braced list of values."""
    kind, value = next(toks)
    if kind == "punct" and value == "(":
        inner = parse_value(toks)
        assert next(toks) == ("punct", ")")
        return inner
    if kind == "str":
        while toks.peek() and toks.peek()[0] == "str":
            value += next(toks)[1]
        return value
    if kind == "bool":
        return value
    assert (kind, value) == ("punct", "{"), (kind, value)
    items = []
    while toks.peek() != ("punct", "}"):
        items.append(parse_value(toks))
        if toks.peek() == ("punct", ","):
            next(toks)
    next(toks)
    return items


class Peekable:
    def __init__(self, it):
        self.it, self.buf = iter(it), []

    def __iter__(self):
        return self

    def __next__(self):
        return self.buf.pop() if self.buf else next(self.it)

    def peek(self):
        if not self.buf:
            try:
                self.buf.append(next(self.it))
            except StopIteration:
                return None
        return self.buf[-1]


def main(sdist, output):
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("vendor/llama.cpp/tests/test-chat-template.cpp"))
        source = tar.extractfile(member).read().decode("utf-8")
    automated = source[source.index("int main_automated_tests"):]
    conversation_text = automated[automated.index("conversation {") + len("conversation "):]
    conversation = parse_value(Peekable(tokens(conversation_text[:conversation_text.index("};") + 1])))
    cases_text = automated[automated.index("test_cases {") + len("test_cases "):]
    cases_text = cases_text[:cases_text.index("};") + 1]
    cases = []
    for values in parse_value(Peekable(tokens(cases_text))):
        case = dict(zip(FIELDS, values))
        case.setdefault("expected_output_jinja", "")
        if not case.get("supported_with_jinja", True):
            continue
        expected = case["expected_output_jinja"] or case.get("expected_output", "")
        if not expected:
            continue  # llama.cpp's case has no expected text (the first, a ChatML template, is only listed)
        cases.append({"name": case["name"], "template": case["template_str"], "bos_token": case.get("bos_token", ""),
                      "eos_token": case.get("eos_token", ""),
                      "extra_conversation": case.get("extra_conversation", []), "expected": expected})
    with open(output, "w", encoding="utf-8") as f:
        json.dump({"source": "llama.cpp tests/test-chat-template.cpp (main_automated_tests), vendored in the "
                             "llama-cpp-python 0.3.36 sdist; extracted by scripts/llamacpp/extract_template_cases.py",
                   "conversation": conversation, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main(*sys.argv[1:])
