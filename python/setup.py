"""Bundles libncclpool.so into the wheel, so `pip install ./python` after a build needs nothing else.

The library comes from $NCCLPOOL_LIBRARY, else the repository's build trees (build/default, then
build/gpu). Without one, the package still installs and looks for the library at run time (see
ncclpool/_capi.py)."""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def find_library():
    env = os.environ.get("NCCLPOOL_LIBRARY")
    if env:
        return env
    for build in ("default", "gpu"):
        hits = sorted(glob.glob(os.path.join(HERE, "..", "build", build, "src", "libncclpool.so.*.*.*")))
        if hits:
            return hits[-1]
    return None


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        # The start-up hook of ncclpool.sglang goes beside the package, into site-packages (docs/sglang.md).
        shutil.copy2(os.path.join(HERE, "ncclpool-sglang.pth"), os.path.join(self.build_lib, "ncclpool-sglang.pth"))
        lib = find_library()
        target = os.path.join(self.build_lib, "ncclpool")
        if lib is None:
            print("ncclpool: no libncclpool.so found to bundle (build first, or set NCCLPOOL_LIBRARY); "
                  "the package will look for it at run time")
            return
        print(f"ncclpool: bundling {lib}")
        shutil.copy2(lib, os.path.join(target, "libncclpool.so"))


setup(cmdclass={"build_py": BuildWithLibrary})
