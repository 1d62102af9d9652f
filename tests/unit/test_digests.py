"""Content digests: one maker, one checker, and a runner that refuses a digest that is not one."""

from __future__ import annotations

import pytest
from jetdbt.services.runner.provision import packages
from jetdbt.services.runner.setup import workspace
from jetdbt.shared.blobs.digests import check_digest, digest_of
from jetdbt.shared.project import bundle


def test_a_digest_is_sha256_and_64_lowercase_hex():
    made = digest_of(b"jetdbt")
    assert made.startswith("sha256:") and len(made) == len("sha256:") + 64
    assert check_digest(made) == made


@pytest.mark.parametrize(
    "value",
    [
        "",
        "sha256:",
        "sha256:" + "0" * 63,
        "sha256:" + "0" * 65,
        "sha256:" + "A" * 64,
        "md5:" + "0" * 64,
        "sha256:" + "0" * 64 + "\n",
        "sha256:../../" + "0" * 58,
    ],
)
def test_anything_else_is_refused_naming_its_first_40_characters(value):
    with pytest.raises(ValueError, match="is not a content digest") as caught:
        check_digest(value)
    assert repr(value[:40]) in str(caught.value)


async def test_a_job_is_never_built_from_a_digest_that_is_not_one(tmp_path):
    with pytest.raises(bundle.BundleRefused, match="'sha256:../x' is not a content digest"):
        await workspace.prepare(None, tmp_path, "sha256:../x", "job")
    with pytest.raises(packages.PackagesRefused, match="<packages>: 'nope'"):
        await packages.PackageCache(tmp_path).tree(None, "nope")
    assert list(tmp_path.iterdir()) == []
