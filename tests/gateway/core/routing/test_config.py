import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.routing.config import (
    is_router,
    router_config,
    routes_and_shadows,
    signature_differences,
)


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


ROUTER = """
name: "digits" platform: "router"
routing {
  sticky_key: "user"
  variant { model: "eager" weight: 3 }
  variant { model: "compiled" weight: 1 }
  variant { model: "tvm" shadow { sample_rate: 0.25 } }
}
"""


def test_routes_and_shadows():
    routes, shadows = routes_and_shadows(config(ROUTER))
    assert [(r.model, r.weight) for r in routes] == [("eager", 3), ("compiled", 1)]
    (shadow,) = shadows
    assert (shadow.model, shadow.sample_rate) == ("tvm", 0.25)
    assert (shadow.rtol, shadow.atol) == (1e-3, 1e-5)  # the defaults for 0 and 0
    assert is_router(config(ROUTER))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("", "routing names no variant"),
        ('variant { model: "digits" weight: 1 }', "cannot route to itself"),
        ('variant { model: "a" weight: -1 }', "weight must be a number >= 0, got -1"),
        ('variant { model: "a" weight: 0 }', "no variant takes traffic"),
        ('variant { model: "a" shadow { sample_rate: 1 } }', "no variant takes traffic"),
        ('variant { model: "a" weight: 1 } variant { model: "a" weight: 2 }', "named twice"),
        ('variant { model: "a" version: "x1" weight: 1 }', "version must be digits"),
        ("variant { weight: 1 }", "a variant has no model name"),
        (
            'variant { model: "a" weight: 1 } variant { model: "b" shadow { sample_rate: 2 } }',
            "sample_rate must be in [0, 1], got 2",
        ),
        (
            'variant { model: "a" weight: 1 } max_shadow_in_flight: -1',
            "max_shadow_in_flight must be >= 0",
        ),
    ],
)
def test_bad_sections_are_refused_with_the_field_named(section, message):
    with pytest.raises(InvalidArgument, match=message.replace("[", r"\[").replace("]", r"\]")):
        routes_and_shadows(config(f'name: "digits" platform: "router" routing {{ {section} }}'))


def test_a_router_declares_no_tensors_of_its_own():
    with pytest.raises(InvalidArgument, match="takes its inputs, outputs and batch size"):
        routes_and_shadows(config(ROUTER + "max_batch_size: 8"))


VARIANT = """
name: "%s" max_batch_size: 8
input { name: "INPUT0" data_type: TYPE_FP32 dims: [784] }
output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [10] }
"""


def test_signatures_that_match_and_those_that_differ():
    eager = config(VARIANT % "eager")
    assert signature_differences(eager, config(VARIANT % "compiled")) == []
    other = config(
        VARIANT.replace("dims: [10]", "dims: [12]").replace("TYPE_FP32 dims: [784]",
                                                           "TYPE_FP16 dims: [784]") % "tvm"
    )  # fmt: skip
    other.output.add(name="EXTRA", data_type=mc.TYPE_INT64, dims=[1])
    assert signature_differences(eager, other) == [
        "input 'INPUT0': FP32 [784] in 'eager', FP16 [784] in 'tvm'",
        "output 'EXTRA' of 'tvm' is not in 'eager'",
        "output 'OUTPUT0': FP32 [10] in 'eager', FP32 [12] in 'tvm'",
    ]
    unbatched = config((VARIANT % "flat").replace("max_batch_size: 8", ""))
    assert (
        "'eager' batches (max_batch_size 8), 'flat' does not"
        in (signature_differences(eager, unbatched)[0])
    )


def test_router_config_takes_the_variants_signature():
    completed = router_config(config(ROUTER), config(VARIANT % "eager"))
    assert completed.max_batch_size == 8
    assert [t.name for t in completed.input] == ["INPUT0"]
    assert completed.routing.variant[0].model == "eager"
