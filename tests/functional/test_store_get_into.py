"""``StoreClient.get_into``: an object received in place into the caller's
buffer (uncoded, coded, several stripes), a buffer too small refused with the
size it needs without breaking the client, read-only buffers refused."""

from __future__ import annotations

import array
import mmap
import os
from typing import Iterator

import pytest

from sdk._erasure import Codec
from sdk._store_client import StoreClient
from storage_functions.daemon import LocalStore
from storage_functions.exceptions import BufferTooSmall, UnknownKey

from . import test_store_local

MiB = 1 << 20

store = test_store_local.store


@pytest.fixture
def client(store: LocalStore) -> Iterator[StoreClient]:
    c = StoreClient(store.address, store.token, codec=Codec(4, 2, stripe_size=4 * MiB))
    yield c
    c.close()


@pytest.mark.parametrize("size", [0, 4096, 3 * MiB + 17, 9 * MiB])  # empty, one slice, one stripe, three
def test_get_into_lands_the_object_in_the_callers_buffer(client: StoreClient, size: int) -> None:
    data = os.urandom(size)
    client.put(f"into-{size}", data)
    buf = bytearray(b"\xee" * (size + 100))
    assert client.get_into(f"into-{size}", buf) == size
    assert buf[:size] == data
    assert buf[size:] == b"\xee" * 100  # nothing written past the object
    assert client.get_into(f"into-{size}", buf) == size  # the buffer is reused as is


def test_get_into_writes_into_an_mmap_and_an_array(client: StoreClient) -> None:
    data = os.urandom(2 * MiB + 8)
    client.put("into-mm", data)
    with mmap.mmap(-1, len(data)) as mm:
        assert client.get_into("into-mm", mm) == len(data)
        assert mm[:] == data
    arr = array.array("Q", bytes(len(data)))  # items of 8 bytes: received as bytes
    assert client.get_into("into-mm", arr) == len(data)
    assert arr.tobytes() == data


def test_a_small_buffer_is_refused_with_the_size_it_needs_and_the_client_goes_on(client: StoreClient) -> None:
    data = os.urandom(5 * MiB)
    client.put("into-big", data)
    with pytest.raises(BufferTooSmall, match=f"{5 * MiB} bytes.*holds {MiB}.*at least") as ei:
        client.get_into("into-big", bytearray(MiB))
    assert ei.value.size == 5 * MiB
    buf = bytearray(ei.value.size)  # what the error says is enough
    assert client.get_into("into-big", buf) == len(data) and buf == data
    assert client.get("into-big") == data  # the client's connections are in step


def test_read_only_buffers_and_unknown_keys(client: StoreClient) -> None:
    client.put("into-ro", b"abc")
    with pytest.raises(TypeError, match="read-only"):
        client.get_into("into-ro", b"xxxx")
    with pytest.raises(UnknownKey):
        client.get_into("into-nope", bytearray(10))


@pytest.mark.parametrize("size", [4096, 64 * 1024, 3 * MiB + 17, 9 * MiB])  # copied out; received in place
def test_get_and_get_buffer_return_fresh_objects_of_the_right_type(client: StoreClient, size: int) -> None:
    data = os.urandom(size)
    client.put(f"fresh-{size}", data)
    first, second = client.get(f"fresh-{size}"), client.get(f"fresh-{size}")
    assert type(first) is bytes and first == data and second == data and first is not second
    buf = client.get_buffer(f"fresh-{size}")
    assert type(buf) is bytearray and buf == data
    buf[:1] = b"\x00" if data[:1] != b"\x00" else b"\x01"  # the caller's own: changing it changes nothing stored
    assert client.get(f"fresh-{size}") == data and first == data
