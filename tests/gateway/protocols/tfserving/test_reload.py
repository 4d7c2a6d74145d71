"""The pure parts of TF Serving's reloads (reload.py): which versions a policy serves,
and where a reload by request may find base paths."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.reload import Reloader
from gateway.protocols.tfserving.served import TfModel, TfServing, policy_versions


@pytest.mark.parametrize(
    ("policy", "served"),
    [
        ({}, {7}),
        ({"latest": {"num_versions": 2}}, {3, 7}),
        ({"all": {}}, {1, 3, 7}),
        ({"specific": {"versions": [1, 9]}}, {1}),
    ],
)
def test_policy_versions(policy, served) -> None:
    assert policy_versions(TfModel("m", Path("/m"), policy), frozenset({1, 3, 7})) == served


def test_a_reload_may_name_base_paths_only_inside_the_start_s_roots(tmp_path) -> None:
    root, outside = tmp_path / "models", tmp_path / "elsewhere"
    (root / "a").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)  # inside by its name, outside where it leads
    tfs = TfServing({}, reload_roots=(root,))
    reloader = Reloader(core=None, tfs=tfs)  # type: ignore[arg-type]  (checks only)
    reloader.check_roots({"a": TfModel("a", root / "a"), "b": TfModel("b", root / "b")})
    for base in (outside, root / "link", root / ".." / "elsewhere"):
        with pytest.raises(TfsError) as refused:
            reloader.check_roots({"x": TfModel("x", base)})
        assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
