"""Where the model-call socket lives: a private directory its path can be bound in."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

from gateway.core.model_calls import MAX_SOCKET_PATH, ModelCalls


async def _never_called(request):
    raise AssertionError("no call was made")


def _bound_and_private(calls: ModelCalls) -> None:
    assert calls.path is not None
    assert len(os.fsencode(calls.path)) <= MAX_SOCKET_PATH
    directory = Path(calls.path).parent
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(calls.path)


def _start_check_close(monkeypatch, temporary: Path) -> str:
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))

    async def run() -> str:
        calls = ModelCalls(_never_called)
        path = await calls.start()
        try:
            await asyncio.to_thread(_bound_and_private, calls)
        finally:
            await calls.close()
        assert not Path(path).parent.exists()  # removed with its socket
        return path

    return asyncio.run(run())


def test_the_socket_goes_under_the_temporary_directory(monkeypatch):
    # (pytest's tmp_path may itself be too deep for a socket: a short one of its own)
    short = Path(tempfile.mkdtemp(prefix="calls-", dir="/tmp"))
    try:
        path = _start_check_close(monkeypatch, short)
        assert Path(path).parent.parent == short
    finally:
        shutil.rmtree(short)


def test_a_temporary_directory_too_deep_for_a_socket_path_falls_back_to_tmp(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)  # with the socket's name, past sockaddr_un's 108 bytes
    deep.mkdir()
    path = _start_check_close(monkeypatch, deep)
    assert Path(path).parent.parent == Path("/tmp")
    assert not any(deep.iterdir())  # the directory made there first is gone
