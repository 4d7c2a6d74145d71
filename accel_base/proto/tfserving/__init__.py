"""TF Serving's gRPC API (tensorflow.serving.PredictionService and ModelService), its
configuration files (ModelServerConfig, BatchingParameters, MonitoringConfig, ...) and
the TensorFlow messages they use (TensorProto, Example, SignatureDef), with TF Serving's
package names, messages and field numbers; generated from protos/tfserving/ by
gateway.tools.proto.regenerate into accel_base.proto.POOL. The modules mirror the
originals' paths: tensorflow_serving.apis.predict_pb2 is
accel_base.proto.tfserving.tensorflow_serving.apis.predict_pb2."""
