"""The Engine API client against a unix-socket server that answers as engines may.

dockerd answers by length, in chunks or until it closes; these check each way of answering and
each way of failing, where a real engine would not choose to show them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from accelkit.runtime.docker_http import EngineClient, EngineRefused

Answer = Callable[[bytes], bytes]


async def _serve(sock: Path, answer: Answer, scenario: Callable[[EngineClient], Awaitable[None]]):
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length")]  # fmt: skip
        body = await reader.readexactly(length[0]) if length else b""
        seen.append(head + body)
        writer.write(answer(head))
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(handle, str(sock))
    try:
        client = EngineClient(f"unix://{sock}", connect_timeout=5, call_timeout=30)
        await scenario(client)
    finally:
        server.close()
        await server.wait_closed()
    return seen


def _run(sock: Path, answer: Answer, scenario: Callable[[EngineClient], Awaitable[None]]):
    return asyncio.run(_serve(sock, answer, scenario))


def test_a_request_carries_its_query_and_json_body(tmp_path: Path) -> None:
    def answer(_head: bytes) -> bytes:
        return b'HTTP/1.1 201 Created\r\nContent-Length: 12\r\n\r\n{"Id": "c1"}'

    async def scenario(client: EngineClient) -> None:
        said = await client.request(
            "POST", "/containers/create", params={"name": "w 1", "all": True}, body={"A": 1}
        )
        assert said == {"Id": "c1"}

    [sent] = _run(tmp_path / "e.sock", answer, scenario)
    assert sent.startswith(b"POST /containers/create?name=w+1&all=1 HTTP/1.1\r\n")
    assert sent.endswith(b'\r\n\r\n{"A": 1}')


def test_chunked_and_closed_answers_are_read_whole(tmp_path: Path) -> None:
    def answer(head: bytes) -> bytes:
        if b"/chunked" in head:
            return (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"4\r\n[1, \r\n3\r\n2]\n\r\n0\r\n\r\n"
            )
        return b"HTTP/1.1 200 OK\r\n\r\n[3]"  # no length: the answer ends with the connection

    async def scenario(client: EngineClient) -> None:
        assert await client.request("GET", "/chunked") == [1, 2]
        assert await client.request("GET", "/closed") == [3]

    _run(tmp_path / "e.sock", answer, scenario)


def test_an_empty_answer_is_none(tmp_path: Path) -> None:
    def answer(_head: bytes) -> bytes:
        return b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"

    async def scenario(client: EngineClient) -> None:
        assert await client.request("POST", "/containers/c1/start") is None

    _run(tmp_path / "e.sock", answer, scenario)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"message": "No such container: c1"}', "No such container: c1"),
        (b"page not found\n", "page not found"),
        (b'["not", "a message"]', '["not", "a message"]'),
    ],
)
def test_an_error_status_is_refused_with_the_engines_words(tmp_path, body, message) -> None:
    def answer(_head: bytes) -> bytes:
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    async def scenario(client: EngineClient) -> None:
        with pytest.raises(EngineRefused) as refused:
            await client.request("GET", "/containers/c1/json")
        assert (refused.value.status, refused.value.message) == (404, message)
        assert str(refused.value) == f"404: {message}"

    _run(tmp_path / "e.sock", answer, scenario)


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"", "closed the connection without an answer"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP answer"),
    ],
)
def test_what_is_no_answer_is_a_connection_error(tmp_path, raw, said) -> None:
    async def scenario(client: EngineClient) -> None:
        with pytest.raises(ConnectionResetError, match=said):
            await client.request("GET", "/version")

    _run(tmp_path / "e.sock", lambda _head: raw, scenario)


def test_an_answer_cut_short_is_an_end_of_file(tmp_path: Path) -> None:
    def answer(_head: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"

    async def scenario(client: EngineClient) -> None:
        with pytest.raises(EOFError):
            await client.request("GET", "/version")

    _run(tmp_path / "e.sock", answer, scenario)


def test_attached_output_arrives_frame_by_frame(tmp_path: Path) -> None:
    def answer(_head: bytes) -> bytes:
        frames = b"\x01\x00\x00\x00\x00\x00\x00\x03out" + b"\x02\x00\x00\x00\x00\x00\x00\x04err\n"
        return b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n" + frames

    async def scenario(client: EngineClient) -> None:
        frames = await client.attach("c1")
        try:
            assert await frames.read() == (1, b"out")
            assert await frames.read() == (2, b"err\n")
            assert await frames.read() is None
        finally:
            frames.close()

    [sent] = _run(tmp_path / "e.sock", answer, scenario)
    assert sent.startswith(b"POST /containers/c1/attach?stream=1&stdout=1&stderr=1 HTTP/1.1")
    assert b"Upgrade: tcp" in sent


def test_attaching_to_a_missing_container_is_refused(tmp_path: Path) -> None:
    def answer(_head: bytes) -> bytes:
        body = b'{"message": "No such container: c9"}'
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    async def scenario(client: EngineClient) -> None:
        with pytest.raises(EngineRefused, match="No such container: c9"):
            await client.attach("c9")

    _run(tmp_path / "e.sock", answer, scenario)


def test_a_missing_socket_is_the_os_error(tmp_path: Path) -> None:
    client = EngineClient(f"unix://{tmp_path / 'none.sock'}", connect_timeout=5, call_timeout=5)
    with pytest.raises(FileNotFoundError):
        asyncio.run(client.request("GET", "/version"))


@pytest.mark.parametrize("url", ["ssh://host", "unix://", "tcp://", "npipe:////./pipe/docker"])
def test_an_address_no_engine_can_have_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="not an engine address accelkit can reach"):
        EngineClient(url, connect_timeout=1, call_timeout=1)


def test_a_tcp_address_names_host_and_port() -> None:
    client = EngineClient("tcp://127.0.0.1:1", connect_timeout=5, call_timeout=5)
    with pytest.raises(ConnectionRefusedError):
        asyncio.run(client.request("GET", "/version"))
