"""The HTTP client's check of an idle pooled connection: open, closed by the server,
or with bytes nobody asked for; answered at once, whatever the socket's timeout."""

from __future__ import annotations

import http.client
import socket
import time

from backends.remote.http_client import _dropped


def pooled(timeout_s: float) -> tuple[http.client.HTTPConnection, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.settimeout(timeout_s)  # as a connection in use has its call's deadline
    connection = http.client.HTTPConnection("127.0.0.1", 1)
    connection.sock = ours
    return connection, theirs


def test_an_open_idle_connection_is_kept_and_the_check_does_not_wait():
    connection, theirs = pooled(5.0)
    start = time.monotonic()
    assert not _dropped(connection)
    assert time.monotonic() - start < 0.5
    assert connection.sock.gettimeout() == 5.0  # put back as it was
    theirs.close()


def test_a_connection_the_server_closed_is_dropped():
    connection, theirs = pooled(5.0)
    theirs.close()
    assert _dropped(connection)


def test_a_connection_with_unasked_bytes_is_dropped():
    connection, theirs = pooled(5.0)
    theirs.sendall(b"HTTP/1.1 408 Request Timeout\r\n\r\n")
    assert _dropped(connection)
    theirs.close()


def test_a_connection_without_a_socket_is_dropped():
    assert _dropped(http.client.HTTPConnection("127.0.0.1", 1))
