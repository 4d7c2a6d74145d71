from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class LogCollectorConfig(_message.Message):
    __slots__ = ("type", "filename_prefix")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_PREFIX_FIELD_NUMBER: _ClassVar[int]
    type: str
    filename_prefix: str
    def __init__(self, type: _Optional[str] = ..., filename_prefix: _Optional[str] = ...) -> None: ...
