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
        "router", "pipeline", "post", "classify", "pre",
    ]  # fmt: skip


def test_a_member_another_loaded_model_uses_stays_and_so_do_its_members():
    loaded = ["pipeline", "other_pipeline", "pre", "classify", "classify2", "post"]
    assert dependents_to_unload("pipeline", loaded, members_of) == ["post", "classify"]
    # router stays for nested2, and with it everything router is made of.
    loaded = ["nested", "nested2", "router", "pipeline", "pre", "classify", "post"]
    assert dependents_to_unload("nested", loaded, members_of) == []
    # classify stays for router, which is not unloaded; pre and post go with pipeline.
    loaded = ["router", "pipeline", "pre", "classify", "post"]
    assert dependents_to_unload("pipeline", loaded, members_of) == ["post", "pre"]


def test_members_not_loaded_are_left_out_and_a_plain_model_has_none():
    assert dependents_to_unload("pipeline", ["pipeline", "pre"], members_of) == ["pre"]
    assert dependents_to_unload("classify", ["classify", "pipeline"], members_of) == []


def test_a_member_comes_after_every_user_whatever_order_the_configs_list_them():
    made_of = {"router": ["x", "pipe"], "pipe": ["x", "y"], "e": ["b", "a"], "a": ["b"]}
    members = lambda name: made_of.get(name, [])  # noqa: E731
    # x is router's own variant and pipe's step: it goes after both.
    assert dependents_to_unload("router", ["router", "pipe", "x", "y"], members) == [
        "pipe", "y", "x",
    ]  # fmt: skip
    assert dependents_to_unload("e", ["e", "a", "b"], members) == ["a", "b"]
