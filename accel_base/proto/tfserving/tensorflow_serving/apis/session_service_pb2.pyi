from accel_base.proto.tfserving.tensorflow.core.protobuf import named_tensor_pb2 as _named_tensor_pb2
from accel_base.proto.tfserving.tensorflow_serving.apis import model_pb2 as _model_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionRunRequest(_message.Message):
    __slots__ = ("model_spec", "feed", "fetch", "target", "tensor_name_is_alias")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    FEED_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TENSOR_NAME_IS_ALIAS_FIELD_NUMBER: _ClassVar[int]
    model_spec: _model_pb2.ModelSpec
    feed: _containers.RepeatedCompositeFieldContainer[_named_tensor_pb2.NamedTensorProto]
    fetch: _containers.RepeatedScalarFieldContainer[str]
    target: _containers.RepeatedScalarFieldContainer[str]
    tensor_name_is_alias: bool
    def __init__(self, model_spec: _Optional[_Union[_model_pb2.ModelSpec, _Mapping]] = ..., feed: _Optional[_Iterable[_Union[_named_tensor_pb2.NamedTensorProto, _Mapping]]] = ..., fetch: _Optional[_Iterable[str]] = ..., target: _Optional[_Iterable[str]] = ..., tensor_name_is_alias: _Optional[bool] = ...) -> None: ...

class SessionRunResponse(_message.Message):
    __slots__ = ("model_spec", "tensor")
    MODEL_SPEC_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    model_spec: _model_pb2.ModelSpec
    tensor: _containers.RepeatedCompositeFieldContainer[_named_tensor_pb2.NamedTensorProto]
    def __init__(self, model_spec: _Optional[_Union[_model_pb2.ModelSpec, _Mapping]] = ..., tensor: _Optional[_Iterable[_Union[_named_tensor_pb2.NamedTensorProto, _Mapping]]] = ...) -> None: ...
