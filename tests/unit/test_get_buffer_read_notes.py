"""A GET served from the persistent buffer still tells the GC window which function
chunks it read (as a GET asked of the functions would), so data read while its upload
waits stays hot; chunks without a place and parity are not noted."""

from __future__ import annotations

from types import SimpleNamespace

from storage_functions.daemon._gc_io import ReadNotes
from storage_functions.daemon._get import GetPath
from storage_functions.daemon._objects import ObjectVersion, Stripe, chunk_key


def test_a_buffer_read_notes_the_placed_data_chunks_it_stands_for() -> None:
    notes = ReadNotes(on=True)
    notes.watch = frozenset({1, 2, 3})  # the degraded functions as of the last tick
    st = Stripe(d=2, p=1, fs=4, ol=8, cl=4, crcs=[0, 0, 0], places=[(1, 0, 0), None, (3, 0, 0)])
    obj = ObjectVersion(key="r/o", version=2, size=8, stripes=[st, st], state="ready")
    GetPath._note_buffer_read(SimpleNamespace(reads=notes), obj)  # type: ignore[arg-type]
    got = list(notes._q)
    assert got == [(1, chunk_key("r/o", 2, 0, 0)), (1, chunk_key("r/o", 2, 1, 0))]  # not the parity on 3


def test_nothing_is_noted_without_a_gc_window() -> None:
    notes = ReadNotes(on=False)
    notes.watch = frozenset({1})
    st = Stripe(d=1, p=0, fs=4, ol=4, cl=4, crcs=[0], places=[(1, 0, 0)])
    GetPath._note_buffer_read(SimpleNamespace(reads=notes), ObjectVersion(key="k", version=1, stripes=[st]))  # type: ignore[arg-type]
    assert not notes._q
