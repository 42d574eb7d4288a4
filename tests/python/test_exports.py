"""The Python extension gives the process nothing but its init symbol (SPEC §8).

An extension that exports its copies of libstdc++ template instantiations (std::num_get<...> and
the guard variables of facet ids, say) can have them clash with the copies torch's libraries bound
first: on the GPU machine's stack that crashed init_process_group("pride") inside istream parsing.
"""

import shutil
import subprocess

import pytest

import pride


def _exported_symbols(path):
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", path], check=True, capture_output=True, text=True)
    names = []
    for line in out.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3:
            names.append(parts[2])
    return names


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_extension_exports_only_its_init_symbol():
    names = _exported_symbols(pride._C.__file__)
    std = [n for n in names if "std::" in n]
    assert not std, f"{pride._C.__file__} exports {len(std)} std:: symbols, e.g. {std[:5]}"
    assert names == ["PyInit__C"], f"{pride._C.__file__} exports more than PyInit__C: {names[:20]}"
