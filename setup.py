"""The wheel and the sdist carry what `jetdbt up` needs beside the code: the built run viewer.

`build_py` builds the viewer when ui/dist is missing or older than its sources
(viewer_build.py: npm from PATH, else from the `ui` extra, which build_backend.py then asks
for) and copies it into the package as services/api/viewer; streams.yaml goes in as
shared/streams.yaml. So `pip install .` (or a wheel built from the project) serves the viewer
with no checkout beside it. `sdist` builds the viewer first too and carries ui/dist, so a wheel
built from an sdist runs no npm. An editable install serves the checkout's own ui/dist and
streams.yaml, and builds nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

from viewer_build import UI, build

ROOT = Path(__file__).resolve().parent


class BuildWithViewer(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if (UI / "src").exists():  # a source that has the viewer's sources builds it
            shutil.copytree(
                build(), Path(self.build_lib, "services", "api", "viewer"), dirs_exist_ok=True
            )
        shutil.copyfile(ROOT / "streams.yaml", Path(self.build_lib, "shared", "streams.yaml"))


class SdistWithViewer(sdist):
    def run(self) -> None:
        build()  # before MANIFEST.in's graft of ui/dist is read
        super().run()


setup(cmdclass={"build_py": BuildWithViewer, "sdist": SdistWithViewer})
