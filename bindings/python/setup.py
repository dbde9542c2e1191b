"""Builds libember with cargo and bundles it in the wheel, beside the package's Python files.

The wheel is tagged py3-none-<platform>: the library is loaded with ctypes, so it serves every Python 3 on the
platform, with no compiled extension. On Linux the platform is ``manylinux_2_N_<arch>``, read from the library's
own glibc needs (manylinux_tag.py), so that package indexes take the wheel.

Where the crate is: in a checkout of ember (`pip install ./bindings/python`) two directories up; in an sdist, in
its ``crate/`` folder, which ``python -m build --sdist`` fills with the crate's source package (`cargo package`:
the files Cargo.toml's ``include`` lists). Either way building needs Rust. EMBER_LIBRARY, when set, bundles that
library instead of building one; CARGO_TARGET_DIR and CARGO are honoured.
"""

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from manylinux_tag import manylinux_tag  # noqa: E402: beside this file, found through the line above

#: The crate in an sdist (written by SourceWithCrate), else the checkout this folder is in.
SDIST_CRATE = HERE / "crate"
CRATE = SDIST_CRATE if (SDIST_CRATE / "Cargo.toml").exists() else HERE.parent.parent
LIBRARY = "libember.dylib" if sys.platform == "darwin" else "libember.so"


def cargo() -> str:
    return os.environ.get("CARGO", "cargo")


def target_dir() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", CRATE / "target"))
    return target if target.is_absolute() else CRATE / target


def built_library() -> Path:
    override = os.environ.get("EMBER_LIBRARY")
    if override:
        return Path(override)
    if not (CRATE / "Cargo.toml").exists():
        sys.exit(f"ember: no Cargo.toml at {CRATE}: build the Python package from a checkout of ember or its sdist")
    subprocess.run([cargo(), "build", "--release", "--lib"], cwd=CRATE, check=True)
    return target_dir() / "release" / LIBRARY


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        destination = Path(self.build_lib) / "ember" / LIBRARY
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built_library(), destination)


class BinaryDistribution(Distribution):
    """A distribution with a platform library: its files go to platlib, where auditwheel and installers expect a
    shared library (a pure one would put them under purelib)."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        if platform.startswith("linux_"):
            library = Path(self.bdist_dir or "") / "ember" / LIBRARY
            if not library.exists():  # get_tag may be asked before the files are laid out
                library = Path(self.get_finalized_command("build_py").build_lib) / "ember" / LIBRARY
            tag = manylinux_tag(library.read_bytes()) if library.exists() else None
            if tag is None:
                print(f"ember: {library} is not manylinux-compatible: the wheel is tagged {platform}", file=sys.stderr)
            platform = tag or platform
        return "py3", "none", platform


class SourceWithCrate(sdist):
    """An sdist that carries the crate (`cargo package`'s source package, unpacked into ``crate/``), so that
    building it needs Rust and nothing else from ember's repository."""

    def make_release_tree(self, base_dir: str, files) -> None:
        super().make_release_tree(base_dir, files)
        destination = Path(base_dir) / "crate"
        if CRATE == SDIST_CRATE:  # an sdist made from an sdist keeps its crate
            shutil.copytree(SDIST_CRATE, destination, ignore=shutil.ignore_patterns("target"))
            return
        subprocess.run([cargo(), "package", "--no-verify", "--allow-dirty", "--quiet"], cwd=CRATE, check=True)
        version = self.distribution.get_version()
        package = target_dir() / "package" / f"ember-{version}.crate"
        with tarfile.open(package) as archive:
            for member in archive.getmembers():
                if not member.isfile():
                    continue
                relative = Path(*Path(member.name).parts[1:])  # below the archive's `ember-VERSION/`
                if relative.name == "Cargo.toml.orig":
                    continue
                path = destination / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.extractfile(member).read())


setup(
    distclass=BinaryDistribution,
    cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel, "sdist": SourceWithCrate},
)
