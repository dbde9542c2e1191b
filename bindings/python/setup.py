"""Builds libember with cargo and bundles it in the wheel, beside the package's Python files.

The wheel is tagged py3-none-<platform>: the library is loaded with ctypes, so it serves every Python 3 on the
platform, with no compiled extension. Build from a checkout of ember (`pip install ./bindings/python`): the crate
is two directories up. EMBER_LIBRARY, when set, bundles that library instead of building one; CARGO_TARGET_DIR
and CARGO are honoured.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

CRATE = Path(__file__).resolve().parent.parent.parent
LIBRARY = "libember.dylib" if sys.platform == "darwin" else "libember.so"


def built_library() -> Path:
    override = os.environ.get("EMBER_LIBRARY")
    if override:
        return Path(override)
    if not (CRATE / "Cargo.toml").exists():
        sys.exit(f"ember: no Cargo.toml at {CRATE}: build the Python package from a checkout of ember")
    cargo = os.environ.get("CARGO", "cargo")
    subprocess.run([cargo, "build", "--release", "--lib"], cwd=CRATE, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", CRATE / "target"))
    if not target.is_absolute():
        target = CRATE / target
    return target / "release" / LIBRARY


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        destination = Path(self.build_lib) / "ember" / LIBRARY
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built_library(), destination)


class PlatformWheel(bdist_wheel):
    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})
