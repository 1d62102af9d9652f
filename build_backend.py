"""The project's build backend: setuptools', asking for node and npm when it must build the viewer.

A wheel or an sdist carries the built run viewer (setup.py), so building one from a checkout
without ui/dist runs npm. On a machine with no npm, the `ui` extra's packages (node and npm as
a wheel) join the build's requirements, so `pip install` of a checkout needs only Python; an
sdist carries ui/dist, so a wheel built from it needs nothing more.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import (
    build_editable,
    build_sdist,
    build_wheel,
    get_requires_for_build_editable,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

from viewer_build import needs_toolchain

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

_PYPROJECT = Path(__file__).resolve().parent / "pyproject.toml"


def _toolchain() -> list[str]:
    if not needs_toolchain():
        return []
    with _PYPROJECT.open("rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]["ui"]


def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return build_meta.get_requires_for_build_wheel(config_settings) + _toolchain()


def get_requires_for_build_sdist(config_settings=None) -> list[str]:
    return build_meta.get_requires_for_build_sdist(config_settings) + _toolchain()
