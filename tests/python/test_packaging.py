"""Host tier: the extension module keeps its statically linked code to itself.

The GPU machine's g++ 13 links libstdc++ statically by default. The module exported that copy's
symbols, so half of its references bound to the process's libstdc++.so (loaded first by Python or
torch) and std::ostream's facet lookup mixed the two copies' locale ids: ``MoeLayer.describe()``
segfaulted in ``operator<<(long)`` with every build of the module (found with a backtrace on an
H100, session 109). The link now passes a version script (``python/exports.map``); this test reads the module's dynamic
symbol table (ELF, no tools needed) and fails if anything but the module's init function and the
linker's own markers is exported."""

from __future__ import annotations

import struct
import sys

import pytest

import fp4gemm._fp4gemm as ext

# Symbols GNU ld / gold / lld may define in any shared object.
LINKER_MARKERS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def exported_symbols(path: str) -> list[str]:
    """Names of the defined, default-visibility global / weak / unique symbols in an ELF64
    little-endian shared object's .dynsym."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not an ELF64 little-endian file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _, sh_type, _, _, off, size, link, _, _, entsize in sections:
        if sh_type != 11:  # SHT_DYNSYM
            continue
        str_off = sections[link][4]
        for i in range(1, size // entsize):
            st_name, st_info, st_other, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", data, off + i * entsize)
            binding, visibility = st_info >> 4, st_other & 3
            if st_shndx == 0 or binding not in (1, 2, 10) or visibility != 0:  # undefined, local, hidden
                continue
            end = data.index(b"\0", str_off + st_name)
            names.append(data[str_off + st_name:end].decode())
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads an ELF shared object (Linux builds)")
def test_the_module_exports_only_its_init_function():
    names = exported_symbols(ext.__file__)
    assert "PyInit__fp4gemm" in names, f"{ext.__file__}: no PyInit__fp4gemm among {names[:20]}"
    leaked = sorted(set(names) - LINKER_MARKERS - {"PyInit__fp4gemm"})
    assert not leaked, (f"{ext.__file__} exports {len(leaked)} symbols of its static archives (libstdc++, the "
                        f"library, the CUDA runtime), e.g. {leaked[:12]}: link it with python/exports.map")


def test_the_symbol_reader_sees_exports(tmp_path):
    """The reader itself: a shared object with known exports, built here when a C compiler is present."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not sys.platform.startswith("linux"):
        pytest.skip("no C compiler (cc / gcc) on PATH to build the reader's fixture")
    src = tmp_path / "x.c"
    src.write_text("int visible_one(void) { return 1; }\n"
                   "__attribute__((visibility(\"hidden\"))) int hidden_one(void) { return 2; }\n"
                   "static int local_one(void) { return 3; }\nint use(void) { return local_one() + hidden_one(); }\n")
    so = tmp_path / "x.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    names = set(exported_symbols(str(so)))
    assert {"visible_one", "use"} <= names and not names & {"hidden_one", "local_one"}, names
