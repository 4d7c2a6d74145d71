from accel_base.proto.tfserving.tensorflow_serving.apis import status_pb2 as _status_pb2
from accel_base.proto.tfserving.tensorflow_serving.config import model_server_config_pb2 as _model_server_config_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ReloadConfigRequest(_message.Message):
    __slots__ = ("config", "metric_names")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    METRIC_NAMES_FIELD_NUMBER: _ClassVar[int]
    config: _model_server_config_pb2.ModelServerConfig
    metric_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, config: _Optional[_Union[_model_server_config_pb2.ModelServerConfig, _Mapping]] = ..., metric_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ReloadConfigResponse(_message.Message):
    __slots__ = ("status", "metric")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    status: _status_pb2.StatusProto
    metric: _containers.RepeatedCompositeFieldContainer[Metric]
    def __init__(self, status: _Optional[_Union[_status_pb2.StatusProto, _Mapping]] = ..., metric: _Optional[_Iterable[_Union[Metric, _Mapping]]] = ...) -> None: ...

class Metric(_message.Message):
    __slots__ = ("name", "int64_value_increase")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INT64_VALUE_INCREASE_FIELD_NUMBER: _ClassVar[int]
    name: str
    int64_value_increase: int
    def __init__(self, name: _Optional[str] = ..., int64_value_increase: _Optional[int] = ...) -> None: ...
