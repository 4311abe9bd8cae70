"""A TCP proxy in front of the test PostgreSQL server that loses connections on purpose.

Real network faults, no database mock: clients connect to ``127.0.0.1:<port>``, the
proxy forwards the bytes to the server's unix socket, and a test can

- ``drop_next_commit_reply()``: forward the next COMMIT to the server, swallow the
  server's reply and close the client's connection: the transaction is committed, the
  client never learns it (an acknowledgement lost in flight);
- ``refuse(True)``: close every new connection at once (no server answers);
- ``cut()``: close every open connection (the server went away under them).

The COMMIT is recognised by its bytes in the client's stream (psycopg sends the command
text in a Query or Parse message); test data never contains them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

_CHUNK = 65536


def unix_socket_of(url: str) -> str:
    """The socket file of a ``...?host=DIR&port=PORT`` URL (tests/pg_cluster.py's)."""
    query = parse_qs(urlsplit(url).query)
    return f"{query['host'][0]}/.s.PGSQL.{query['port'][0]}"


class FaultProxy:
    def __init__(self, unix_socket: str) -> None:
        self._target = unix_socket
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._drop_commit = False
        self._refusing = False
        self.commits_dropped = 0
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # -- controls --------------------------------------------------------------------

    def drop_next_commit_reply(self) -> None:
        with self._lock:
            self._drop_commit = True

    def refuse(self, refusing: bool) -> None:
        with self._lock:
            self._refusing = refusing

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _close(sock)

    # -- plumbing --------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                _close(client)
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self._target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets += [client, server]
            pair = {"drop_reply": False}
            threading.Thread(
                target=self._upstream, args=(client, server, pair), daemon=True
            ).start()
            threading.Thread(
                target=self._downstream, args=(server, client, pair), daemon=True
            ).start()

    def _upstream(
        self, client: socket.socket, server: socket.socket, pair: dict[str, bool]
    ) -> None:
        try:
            while chunk := client.recv(_CHUNK):
                if b"COMMIT" in chunk:
                    with self._lock:
                        if self._drop_commit:
                            self._drop_commit = False
                            pair["drop_reply"] = True
                server.sendall(chunk)
        except OSError:
            pass
        _close(server)
        _close(client)

    def _downstream(
        self, server: socket.socket, client: socket.socket, pair: dict[str, bool]
    ) -> None:
        try:
            while chunk := server.recv(_CHUNK):
                if pair["drop_reply"]:
                    # the server has answered the COMMIT: it is done; the client never hears
                    with self._lock:
                        self.commits_dropped += 1
                    break
                client.sendall(chunk)
        except OSError:
            pass
        _close(client)
        _close(server)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def fault_proxy(unix_socket: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(unix_socket)
    try:
        yield proxy
    finally:
        proxy.close()
