import asyncio
import itertools

import numpy as np

from accel_base.errors import Unavailable
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.routing.shadow import Shadow, Shadows, copy_request


def request(value: float = 1.0) -> InferRequest:
    return InferRequest(
        "router",
        inputs=[Tensor("x", "FP32", np.full((1, 2), value, dtype=np.float32))],
        outputs=[RequestedOutput("y", {"shared_memory_region": "out"})],
        parameters={"timeout": 100, "user": "u1"},
    )


def response(values) -> InferResponse:
    return InferResponse("m", "1", outputs=[Tensor("y", "FP32", np.array([values]))])


def test_sampling_is_exact_and_even():
    shadow = Shadow("s", "", 0.25, 1e-3, 1e-5)
    picks = [shadow.sampled() for _ in range(100)]
    assert sum(picks) == 25
    assert picks[:8] == [False, False, False, True] * 2


def test_a_copy_owns_its_inputs_and_writes_no_shared_memory():
    original = request()
    copy = copy_request(original, "s", "2")
    original.inputs[0].data[...] = 7  # the client reuses its buffer once answered
    assert copy.inputs[0].data.tolist() == [[1.0, 1.0]]
    assert (copy.model_name, copy.model_version) == ("s", "2")
    assert copy.outputs[0].parameters == {}
    assert copy.parameters == {"user": "u1"}  # the caller's timeout is not the shadow's


class Variant:
    def __init__(self, outputs=None, delay_s: float = 0.0, error=None) -> None:
        self.outputs, self.delay_s, self.error = outputs, delay_s, error

    async def infer(self, request: InferRequest) -> InferResponse:
        await asyncio.sleep(self.delay_s)
        if self.error:
            raise self.error
        return response(self.outputs)


def test_copies_are_compared_bounded_and_failures_only_counted():
    async def scenario():
        agree = Shadow("agree", "", 1.0, 1e-3, 1e-5)
        differ = Shadow("differ", "", 1.0, 1e-3, 1e-5)
        variants = {"agree": Variant([0.1, 0.9], 0.01), "differ": Variant([0.9, 0.1], 0.01)}

        async def resolve(name, version):
            return variants[name]

        shadows = Shadows([agree, differ], 4, resolve)
        for _ in range(3):  # 6 copies wanted, 4 may be held at once
            shadows.send(shadows.take(request()), response([0.1, 0.9]))
        await shadows.close()
        assert (agree.stats.requests, differ.stats.requests) == (2, 2)
        assert agree.stats.dropped + differ.stats.dropped == 2
        assert (agree.stats.within_tolerance, agree.stats.top1_agreed) == (2, 2)
        assert (differ.stats.within_tolerance, differ.stats.top1_agreed) == (0, 0)
        assert differ.stats.max_abs_error > 0.7
        assert shadows.held == 0

        variants["agree"] = Variant(error=Unavailable("down"))
        shadows.send(shadows.take(request()), None)  # the primary failed: nothing compared
        await shadows.close()
        assert agree.stats.failures == 1 and agree.stats.compared == 2
        assert differ.stats.compared == 2 and differ.stats.requests == 3

    asyncio.run(scenario())


def test_copies_answered_together_compare_one_loop_turn_each():
    """A shadow that batches answers many copies at once; comparing them all in one turn
    would hold every caller's request behind them."""

    async def scenario():
        shadow = Shadow("batched", "", 1.0, 1e-3, 1e-5)
        answered = asyncio.Event()
        waiting = 0
        all_waiting = asyncio.Event()

        class Batched:  # every copy answered by one event, as a batch would be
            async def infer(self, request: InferRequest) -> InferResponse:
                nonlocal waiting
                waiting += 1
                if waiting == 8:
                    all_waiting.set()
                await answered.wait()
                return response([0.1, 0.9])

        async def resolve(name, version):
            return Batched()

        shadows = Shadows([shadow], 16, resolve)
        for _ in range(8):
            shadows.send(shadows.take(request()), response([0.1, 0.9]))
        await asyncio.wait_for(all_waiting.wait(), 10)  # every copy waits for its batch

        turns = []  # how many comparisons had been made at each turn of the loop

        def tick() -> None:
            turns.append(shadow.stats.compared)
            if shadow.stats.compared < 8:
                asyncio.get_running_loop().call_soon(tick)

        answered.set()
        tick()
        await shadows.close()
        assert shadow.stats.compared == 8
        # Each turn saw at most one more comparison than the turn before.
        assert max(b - a for a, b in itertools.pairwise(turns)) == 1
        assert shadows.held == 0

    asyncio.run(scenario())
