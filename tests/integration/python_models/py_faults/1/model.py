"""Does what COMMAND says: "ok" echoes it, "raise" raises, "exit" calls sys.exit, and
"segfault" reads address 0, which ends the process with SIGSEGV."""

import ctypes
import sys

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            command = pb_utils.get_input_tensor_by_name(request, "COMMAND").as_numpy()
            word = command.reshape(-1)[0].decode()
            if word == "raise":
                raise RuntimeError("the model was asked to raise")
            if word == "exit":
                sys.exit(3)
            if word == "segfault":
                ctypes.string_at(0)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", command)]))
        return responses
