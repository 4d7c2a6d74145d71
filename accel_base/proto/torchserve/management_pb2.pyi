from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ManagementResponse(_message.Message):
    __slots__ = ("msg",)
    MSG_FIELD_NUMBER: _ClassVar[int]
    msg: str
    def __init__(self, msg: _Optional[str] = ...) -> None: ...

class DescribeModelRequest(_message.Message):
    __slots__ = ("model_name", "model_version", "customized")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CUSTOMIZED_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_version: str
    customized: bool
    def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[str] = ..., customized: _Optional[bool] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("limit", "next_page_token")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    limit: int
    next_page_token: int
    def __init__(self, limit: _Optional[int] = ..., next_page_token: _Optional[int] = ...) -> None: ...

class RegisterModelRequest(_message.Message):
    __slots__ = ("batch_size", "handler", "initial_workers", "max_batch_delay", "model_name", "response_timeout", "runtime", "synchronous", "url", "s3_sse_kms", "startup_timeout")
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    INITIAL_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_DELAY_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SYNCHRONOUS_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    S3_SSE_KMS_FIELD_NUMBER: _ClassVar[int]
    STARTUP_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    handler: str
    initial_workers: int
    max_batch_delay: int
    model_name: str
    response_timeout: int
    runtime: str
    synchronous: bool
    url: str
    s3_sse_kms: bool
    startup_timeout: int
    def __init__(self, batch_size: _Optional[int] = ..., handler: _Optional[str] = ..., initial_workers: _Optional[int] = ..., max_batch_delay: _Optional[int] = ..., model_name: _Optional[str] = ..., response_timeout: _Optional[int] = ..., runtime: _Optional[str] = ..., synchronous: _Optional[bool] = ..., url: _Optional[str] = ..., s3_sse_kms: _Optional[bool] = ..., startup_timeout: _Optional[int] = ...) -> None: ...

class ScaleWorkerRequest(_message.Message):
    __slots__ = ("model_name", "model_version", "max_worker", "min_worker", "number_gpu", "synchronous", "timeout")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKER_FIELD_NUMBER: _ClassVar[int]
    MIN_WORKER_FIELD_NUMBER: _ClassVar[int]
    NUMBER_GPU_FIELD_NUMBER: _ClassVar[int]
    SYNCHRONOUS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_version: str
    max_worker: int
    min_worker: int
    number_gpu: int
    synchronous: bool
    timeout: int
    def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[str] = ..., max_worker: _Optional[int] = ..., min_worker: _Optional[int] = ..., number_gpu: _Optional[int] = ..., synchronous: _Optional[bool] = ..., timeout: _Optional[int] = ...) -> None: ...

class SetDefaultRequest(_message.Message):
    __slots__ = ("model_name", "model_version")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_version: str
    def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...

class UnregisterModelRequest(_message.Message):
    __slots__ = ("model_name", "model_version")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    model_version: str
    def __init__(self, model_name: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...
