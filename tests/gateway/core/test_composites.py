"""What `unload_dependents` takes down with a model (gateway/core/composites.py)."""

from __future__ import annotations

from gateway.core.composites import dependents_to_unload

MADE_OF = {
    "pipeline": ["pre", "classify", "post"],
    "other_pipeline": ["pre", "classify2"],
    "router": ["pipeline", "classify"],
    "nested": ["router"],
    "nested2": ["router"],
}


def members_of(name: str) -> list[str]:
    return MADE_OF.get(name, [])


def test_members_of_every_level_go_composites_first():
    loaded = ["nested", "router", "pipeline", "pre", "classify", "post"]
    assert dependents_to_unload("nested", loaded, members_of) == [
        "router", "pipeline", "classify", "pre", "post",
    ]  # fmt: skip


def test_a_member_another_loaded_model_uses_stays_and_so_do_its_members():
    loaded = ["pipeline", "other_pipeline", "pre", "classify", "classify2", "post"]
    assert dependents_to_unload("pipeline", loaded, members_of) == ["classify", "post"]
    # router stays for nested2, and with it everything router is made of.
    loaded = ["nested", "nested2", "router", "pipeline", "pre", "classify", "post"]
    assert dependents_to_unload("nested", loaded, members_of) == []
    # classify stays for router, which is not unloaded; pre and post go with pipeline.
    loaded = ["router", "pipeline", "pre", "classify", "post"]
    assert dependents_to_unload("pipeline", loaded, members_of) == ["pre", "post"]


def test_members_not_loaded_are_left_out_and_a_plain_model_has_none():
    assert dependents_to_unload("pipeline", ["pipeline", "pre"], members_of) == ["pre"]
    assert dependents_to_unload("classify", ["classify", "pipeline"], members_of) == []
