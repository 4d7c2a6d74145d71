"""BYTES in and out: each string upper-cased, and its length in bytes. The model declares
its own inputs and outputs (auto_complete_config), as Triton allows. A request whose
text is empty gets an error of its own; the other requests of the batch do not."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config.as_dict()
        declared = {tensor["name"] for tensor in config["input"] + config["output"]}
        for tensor in ({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]},):
            if tensor["name"] not in declared:
                auto_complete_model_config.add_input(tensor)
        for tensor in (
            {"name": "UPPER", "data_type": "TYPE_STRING", "dims": [-1]},
            {"name": "LENGTH", "data_type": "TYPE_INT32", "dims": [-1]},
        ):
            if tensor["name"] not in declared:
                auto_complete_model_config.add_output(tensor)
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def initialize(self, args):
        config = json.loads(args["model_config"])
        upper = pb_utils.get_output_config_by_name(config, "UPPER")
        length = pb_utils.get_output_config_by_name(config, "LENGTH")
        self.upper_dtype = pb_utils.triton_string_to_numpy(upper["data_type"])
        self.length_dtype = pb_utils.triton_string_to_numpy(length["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            if any(len(item) == 0 for item in text.reshape(-1)):
                error = pb_utils.TritonError(
                    "TEXT has an empty string", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            upper = np.array([item.upper() for item in text.reshape(-1)], dtype=self.upper_dtype)
            length = np.array([len(item) for item in text.reshape(-1)], dtype=self.length_dtype)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("UPPER", upper.reshape(text.shape)),
                        pb_utils.Tensor("LENGTH", length.reshape(text.shape)),
                    ]
                )
            )
        return responses
