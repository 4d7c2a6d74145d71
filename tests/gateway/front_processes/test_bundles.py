import numpy as np
import pytest

from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.front_processes import bundles


def request(rows: int = 1, value: int = 0, **changes) -> InferRequest:
    data = np.full((rows, 16), value, dtype=np.int32)
    made = InferRequest(
        "simple",
        id=f"r{value}",
        inputs=[Tensor("INPUT0", "INT32", data), Tensor("INPUT1", "INT32", data + 1)],
        outputs=[RequestedOutput("OUTPUT0", {"binary_data": True})],
        parameters={"binary_data_output": True},
    )
    for name, value in changes.items():
        setattr(made, name, value)
    return made


def test_requests_alike_but_for_their_ids_data_and_rows_share_a_key():
    key = bundles.bundle_key(request())
    assert key is not None
    assert bundles.bundle_key(request(rows=3, value=7)) == key
    # What perf_analyzer's gRPC calls carry, read only by a decoupled model's stream.
    flagged = request(parameters={"triton_enable_empty_final_response": True})
    assert bundles.bundle_key(flagged) == key  # in the same bundle as those without


@pytest.mark.parametrize(
    "changes",
    [
        {"parameters": {"priority": 1}},  # the batcher reads it
        {"parameters": {"timeout": 100}},
        {"deadline": 5.0},
        {"header": lambda name: "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},  # traceparent
        {"stream": ("token", ["OUTPUT0"])},
        {"inputs": []},
        {"outputs": [RequestedOutput("OUTPUT0", {"classification": [1]})]},  # unhashable
    ],
)
def test_a_request_with_anything_of_its_own_is_not_bundled(changes):
    assert bundles.bundle_key(request(**changes)) is None


def test_tensors_that_cannot_merge_are_not_bundled():
    words = request()
    words.inputs[0] = Tensor("INPUT0", "BYTES", np.array([[b"a"]], dtype=object))
    ragged = request()
    ragged.inputs[1] = Tensor("INPUT1", "INT32", np.zeros((2, 16), np.int32))
    scalar = request()
    scalar.inputs[0] = Tensor("INPUT0", "INT32", np.array(1, np.int32))
    tagged = request()
    tagged.inputs[0].parameters = {"shared_memory_region": "r"}
    for one in (words, ragged, scalar, tagged):
        assert bundles.bundle_key(one) is None


def test_different_shapes_or_outputs_make_different_keys():
    key = bundles.bundle_key(request())
    wider = request()
    wider.inputs[0] = Tensor("INPUT0", "INT32", np.zeros((1, 17), np.int32))
    other_output = request(outputs=[RequestedOutput("OUTPUT1")])
    assert bundles.bundle_key(wider) not in (None, key)
    assert bundles.bundle_key(other_output) not in (None, key)


def test_runs_hold_at_most_the_rows_allowed_in_arrival_order():
    members = [request(rows=r, value=i) for i, r in enumerate([3, 3, 3, 9, 1])]
    runs = bundles.chunks(members, 8)
    assert [[m.id for m in run] for run in runs] == [["r0", "r1"], ["r2"], ["r3"], ["r4"]]


def test_merged_and_split_give_each_member_its_own_rows_and_id():
    members = [request(rows=r, value=i) for i, r in enumerate([1, 2, 1])]
    one = bundles.merged(members)
    assert one.inputs[0].data.shape == (4, 16) and one.id == "" and one.parameters == {}
    assert one.outputs == members[0].outputs
    total = one.inputs[0].data + one.inputs[1].data
    response = InferResponse(
        "simple", "1", "", {"p": 1}, [Tensor("OUTPUT0", "INT32", total, {"x": 2})]
    )
    answers = bundles.split(response, members)
    for member, answer in zip(members, answers, strict=True):
        expected = member.inputs[0].data + member.inputs[1].data
        np.testing.assert_array_equal(answer.outputs[0].data, expected)
        assert (answer.id, answer.model_version, answer.parameters) == (member.id, "1", {"p": 1})
    answers[0].parameters["p"] = 9  # each answer's parameters are its own
    assert answers[1].parameters == {"p": 1}


def test_an_answer_without_the_bundles_rows_is_refused():
    members = [request(), request(value=1)]
    short = InferResponse("simple", "1", outputs=[Tensor("OUTPUT0", "INT32", np.zeros((1, 16)))])
    with pytest.raises(ValueError, match="bundle of 2 rows"):
        bundles.split(short, members)
