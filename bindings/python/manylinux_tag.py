"""The manylinux platform tag (PEP 600) of the bundled libember.so, read from the library itself.

A manylinux wheel promises to run on any Linux whose glibc is at least ``2.N``, given that it links nothing but the
libraries every such system has. Both facts are in the ELF file: its ``DT_NEEDED`` entries name the libraries it
links, and its version-needs section (``.gnu.version_r``) the symbol versions it asks of each (``GLIBC_2.17``...).
The tag is ``manylinux_2_N_<arch>`` for the highest ``GLIBC_2.N``, computed here with the standard library alone so
that building the wheel needs no tool beyond setuptools; ``make python-test`` checks the result with ``auditwheel
show`` (``check_wheel.py``). A library that links anything else, or an ELF file this cannot read, gets no manylinux
tag: ``None``, and the wheel keeps the plain ``linux_<arch>`` tag.
"""

from __future__ import annotations

import re
import struct
from typing import Dict, List, Optional, Tuple

#: The libraries PEP 600 lets a manylinux wheel link without bundling them (auditwheel's policy list, for the
#: architectures ember builds on; libstdc++ is not among them because ember links no C++).
SYSTEM_LIBRARIES = frozenset({
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libgcc_s.so.1",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
})
#: ELF ``e_machine`` values, as wheel tags name the architectures.
ARCHITECTURES = {62: "x86_64", 183: "aarch64"}

_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_DT_NULL, _DT_NEEDED = 0, 1
_GLIBC_VERSION = re.compile(r"GLIBC_2\.(\d+)$")


class _Elf:
    """The parts of a little-endian 64-bit ELF file this module reads: its sections and their strings."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a little-endian 64-bit ELF file")
        self.data = data
        (self.machine,) = struct.unpack_from("<H", data, 18)
        (section_offset,) = struct.unpack_from("<Q", data, 40)
        entry_size, count = struct.unpack_from("<HH", data, 58)
        # (type, link, offset, size) of each section header.
        self.sections: List[Tuple[int, int, int, int]] = []
        for index in range(count):
            base = section_offset + index * entry_size
            _, kind = struct.unpack_from("<II", data, base)
            offset, size, link = struct.unpack_from("<QQI", data, base + 24)
            self.sections.append((kind, link, offset, size))

    def string(self, table: int, offset: int) -> str:
        start = self.sections[table][2] + offset
        return self.data[start:self.data.index(b"\0", start)].decode("ascii")

    def of_type(self, kind: int) -> List[Tuple[int, int, int, int]]:
        return [section for section in self.sections if section[0] == kind]

    def needed_libraries(self) -> List[str]:
        names = []
        for _, link, offset, size in self.of_type(_SHT_DYNAMIC):
            for base in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", self.data, base)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    names.append(self.string(link, value))
        return names

    def needed_versions(self) -> Dict[str, List[str]]:
        """Each library's symbol versions the file needs (``Elf64_Verneed`` entries and their ``Elf64_Vernaux``)."""
        versions: Dict[str, List[str]] = {}
        for _, link, offset, _ in self.of_type(_SHT_GNU_VERNEED):
            entry = offset
            while True:
                _, count, file, aux, following = struct.unpack_from("<HHIII", self.data, entry)
                names = versions.setdefault(self.string(link, file), [])
                item = entry + aux
                for _ in range(count):
                    _, _, _, name, after = struct.unpack_from("<IHHII", self.data, item)
                    names.append(self.string(link, name))
                    item += after
                if following == 0:
                    break
                entry += following
        return versions


def manylinux_tag(library: bytes) -> Optional[str]:
    """``manylinux_2_N_<arch>`` for the ELF shared library ``library`` (its bytes), or ``None`` when it links a
    library outside :data:`SYSTEM_LIBRARIES` or is not an ELF file of a known architecture."""
    try:
        elf = _Elf(library)
        needed = elf.needed_libraries()
        versions = elf.needed_versions()
    except (ValueError, struct.error, IndexError, UnicodeDecodeError):
        return None
    architecture = ARCHITECTURES.get(elf.machine)
    if architecture is None or not set(needed) <= SYSTEM_LIBRARIES:
        return None
    minors = [int(m.group(1)) for names in versions.values() for m in map(_GLIBC_VERSION.match, names) if m]
    # Every glibc a wheel may target is 2.17 or later (manylinux2014's); a library needing less claims that.
    return f"manylinux_2_{max(minors + [17])}_{architecture}"


if __name__ == "__main__":
    import sys

    with open(sys.argv[1], "rb") as handle:
        print(manylinux_tag(handle.read()))
