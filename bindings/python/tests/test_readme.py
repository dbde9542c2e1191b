"""The package README's examples run as written, from the root of the checkout (their model paths are relative
to it), each in a fresh interpreter, and print what the README says they print."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import MODEL, ROOT

README = ROOT / "bindings" / "python" / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) == 3


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_a_readme_example_runs(index: int) -> None:
    code = EXAMPLES[index].replace("models/SmolLM2-135M-Instruct.Q4_1.gguf", str(MODEL))
    ran = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    # Each `print(...)  # what it prints` comment that states a literal result holds.
    for expected in re.findall(r"print\(error[^)]*\)\s+# (.+)", EXAMPLES[index]):
        assert expected.strip() in ran.stdout, (expected, ran.stdout)
    assert ran.stdout.strip()
