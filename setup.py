"""The one native piece: a SIGBUS-guarded memcpy for shared-memory regions. Optional: where
it cannot be built (no C compiler), the regions are read and written with pread/pwrite."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("accel_base._guarded_copy", ["accel_base/_guarded_copy.c"], optional=True)
    ]
)
