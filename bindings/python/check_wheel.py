"""Checks a built wheel as a package index and installer would: ``python check_wheel.py WHEEL``.

- ``auditwheel show`` (run from this Python's environment) reads the bundled library and names the platform tag
  it is consistent with: the wheel's own tag (setup.py computes it with manylinux_tag.py) must be that one, a
  manylinux tag, so that an index accepts the wheel and pip on an older Linux refuses it rather than failing at
  import.
- The library sits in the wheel's root (platlib), not under ``.data/purelib``.
- The metadata carries the package's README as its description.

Exits non-zero, saying what is wrong, on the first failure. ``make python-test`` runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path


def fail(message: str) -> None:
    sys.exit(f"check_wheel: {message}")


def main(wheel: Path) -> None:
    platform = wheel.stem.split("-")[-1]
    if not platform.startswith("manylinux_"):
        fail(f"{wheel.name} is tagged {platform}, not manylinux")
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    verdict = re.search(r'consistent with the\s+following platform tag:\s+"([^"]+)"', shown.stdout)
    if shown.returncode != 0 or verdict is None:
        fail(f"auditwheel show failed ({shown.returncode}):\n{shown.stdout}{shown.stderr}")
    if verdict.group(1) != platform:
        fail(f"{wheel.name} is tagged {platform}; auditwheel says {verdict.group(1)}")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if "ember/libember.so" not in names:
            fail(f"no ember/libember.so at the wheel's root: {names}")
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    readme = (Path(__file__).with_name("README.md")).read_text()
    if readme.strip() not in metadata:
        fail("the wheel's METADATA does not carry README.md")
    print(f"check_wheel: {wheel.name}: auditwheel agrees ({platform}); library in platlib; README in METADATA")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
