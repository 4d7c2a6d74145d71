"""Calls the `simple` model of the same gateway for each request (Triton's business-logic
scripting, with async_exec so the calls of a batch run together), and answers its two
outputs under names of its own."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        calls = [
            pb_utils.InferenceRequest(
                model_name="simple",
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            ).async_exec()
            for request in requests
        ]
        responses = []
        for answer in await asyncio.gather(*calls):
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            difference = pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("SUM", total), pb_utils.Tensor("DIFFERENCE", difference)]
                )
            )
        return responses
