"""Everything installs under one namespace, `jetdbt.`: the repository's top-level folders
`shared`, `services` and `projections` become `jetdbt.shared`, `jetdbt.services` and
`jetdbt.projections` (a package mapping), so another distribution's `shared` never collides.

The wheel and the sdist carry what `jetdbt up` needs beside the code: the built run viewer.

`build_py` builds the viewer when ui/dist is missing or older than its sources
(viewer_build.py: npm from PATH, else from the `ui` extra, which build_backend.py then asks
for) and copies it into the package as jetdbt/services/api/viewer; streams.yaml goes in as
jetdbt/shared/streams.yaml. So `pip install .` (or a wheel built from the project) serves the viewer
with no checkout beside it. `sdist` builds the viewer first too and carries ui/dist, so a wheel
built from an sdist runs no npm. An editable install serves the checkout's own ui/dist and
streams.yaml, and builds nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

from viewer_build import UI, build

ROOT = Path(__file__).resolve().parent
PARTS = ("shared", "services", "projections")


class BuildWithViewer(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if (UI / "src").exists():  # a source that has the viewer's sources builds it
            shutil.copytree(
                build(),
                Path(self.build_lib, "jetdbt", "services", "api", "viewer"),
                dirs_exist_ok=True,
            )
        shutil.copyfile(
            ROOT / "streams.yaml", Path(self.build_lib, "jetdbt", "shared", "streams.yaml")
        )


class SdistWithViewer(sdist):
    def run(self) -> None:
        build()  # before MANIFEST.in's graft of ui/dist is read
        super().run()


setup(
    packages=[f"jetdbt.{p}" for p in find_packages(include=[f"{part}*" for part in PARTS])],
    package_dir={f"jetdbt.{part}": part for part in PARTS},
    package_data={"jetdbt.projections": ["migrations/*.sql"]},
    cmdclass={"build_py": BuildWithViewer, "sdist": SdistWithViewer},
)
