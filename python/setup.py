"""Builds loom._loom (a CPython extension in C over libloom) and bundles libloom.so.0 beside it.

Where libloom comes from: $LOOM_BUILD_DIR (the CMake build tree; scripts/install-python.sh sets
it), else ../build next to this file. loom.h comes from the source tree that build was made from
(its CMakeCache.txt says), else $LOOM_SOURCE_DIR, else the parent of this folder. The extension
finds the bundled copy through an rpath of $ORIGIN, so no LD_LIBRARY_PATH is needed.
"""
import os
import re
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def build_dir():
    d = Path(os.environ.get("LOOM_BUILD_DIR") or HERE.parent / "build").resolve()
    if not (d / "lib" / "libloom.so.0").exists():
        raise SystemExit(f"loom: no libloom.so.0 under {d}/lib; build Loom first (make) or set LOOM_BUILD_DIR")
    return d


def source_dir(bdir):
    cache = bdir / "CMakeCache.txt"
    if cache.exists():
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(), re.M)
        if m and (Path(m.group(1)) / "include" / "loom" / "loom.h").exists():
            return Path(m.group(1))
    d = Path(os.environ.get("LOOM_SOURCE_DIR") or HERE.parent)
    if not (d / "include" / "loom" / "loom.h").exists():
        raise SystemExit(f"loom: no include/loom/loom.h under {d}; set LOOM_SOURCE_DIR")
    return d


class BuildExt(build_ext):
    """Links against the build tree's libloom and copies libloom.so.0 next to the extension."""

    def run(self):
        bdir = build_dir()
        src = source_dir(bdir)
        for ext in self.extensions:
            ext.include_dirs.append(str(src / "include"))
            ext.library_dirs.append(str(bdir / "lib"))
        super().run()
        lib = (bdir / "lib" / "libloom.so.0").resolve()
        dest = Path(self.get_ext_fullpath("loom._loom")).parent / "libloom.so.0"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, dest)
        (dest.parent / "_build_info.py").write_text(
            '"""Where this installation of loom was built from (written by setup.py)."""\n'
            f"BUILD_DIR = {str(bdir)!r}\nSOURCE_DIR = {str(src)!r}\n")


setup(
    ext_modules=[
        Extension(
            "loom._loom",
            sources=["loom/_loom.c"],
            libraries=["loom"],
            extra_compile_args=["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
                                "-Wno-cast-function-type"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
