"""cmake/PrideUcx.cmake's default, PRIDE_UCX=auto: the system's UCX where pkg-config has it, else the
libucx wheel of the Python interpreter (GPU machines without root: `pip install libucx-cu13`), else a
configure error that says how to get either.

Each case configures a three-line project that includes only that module (a few seconds). The wheel is
stood in for by a package named libucx whose include/ and lib/ point at this machine's UCX, which is
what the module reads of the real wheel; pkg-config is blinded with PKG_CONFIG_LIBDIR.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CMAKE = shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake is not on PATH")


def _system_ucx_lib_dir():
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "ucx"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _configure(tmp_path, name, env_extra, *defines):
    project = tmp_path / "project"
    if not project.exists():
        project.mkdir()
        (project / "CMakeLists.txt").write_text(
            "cmake_minimum_required(VERSION 3.20)\nproject(ucx_probe LANGUAGES C CXX)\n"
            f"list(APPEND CMAKE_MODULE_PATH {ROOT / 'cmake'})\ninclude(PrideUcx)\n")
    env = dict(os.environ, **env_extra)
    proc = subprocess.run([CMAKE, "-S", str(project), "-B", str(tmp_path / name), f"-DPython3_EXECUTABLE={sys.executable}",
                           *defines], capture_output=True, text=True, env=env, timeout=120)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())  # CMake wraps its messages


@pytest.fixture
def fake_wheel(tmp_path):
    libdir = _system_ucx_lib_dir()
    if libdir is None:
        pytest.skip("no system UCX to stand in for the wheel's")
    package = tmp_path / "site" / "libucx"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "include").symlink_to("/usr/include")
    (package / "lib").symlink_to(libdir)
    return tmp_path / "site"


def test_auto_takes_the_system_ucx_where_pkg_config_has_it(tmp_path):
    if _system_ucx_lib_dir() is None:
        pytest.skip("pkg-config has no ucx here")
    rc, out = _configure(tmp_path, "system", {})
    assert rc == 0, out
    assert "(PRIDE_UCX=auto: system, pkg-config)" in out, out


def test_auto_takes_the_wheel_where_there_is_no_system_ucx(tmp_path, fake_wheel):
    rc, out = _configure(tmp_path, "wheel", {"PKG_CONFIG_LIBDIR": str(tmp_path / "none"), "PYTHONPATH": str(fake_wheel)})
    assert rc == 0, out
    assert f"(PRIDE_UCX=auto: wheel, at {fake_wheel / 'libucx'})" in out, out


def test_auto_without_either_says_how_to_get_one(tmp_path):
    rc, out = _configure(tmp_path, "none", {"PKG_CONFIG_LIBDIR": str(tmp_path / "none"), "PYTHONPATH": ""})
    assert rc != 0, out
    assert "pride needs UCX and found none" in out and "apt install libucx-dev" in out and \
        "pip install libucx-cu13" in out, out


def test_an_explicit_choice_is_kept(tmp_path, fake_wheel):
    # PRIDE_UCX=wheel takes the wheel even where the system has UCX; =system fails without pkg-config's.
    rc, out = _configure(tmp_path, "wheel", {"PYTHONPATH": str(fake_wheel)}, "-DPRIDE_UCX=wheel")
    assert rc == 0 and "(PRIDE_UCX=wheel, at" in out, out
    rc, out = _configure(tmp_path, "system", {"PKG_CONFIG_LIBDIR": str(tmp_path / "none"),
                                              "PYTHONPATH": str(fake_wheel)}, "-DPRIDE_UCX=system")
    assert rc != 0, out
