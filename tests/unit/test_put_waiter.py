"""The PUT path's ``Waiter`` when armed (``_session``'s answer from the thread of a
PUT's last function reply): the completion runs exactly once, on the last reply's
thread when every chunk was stored, on a thread of its own when one failed (it
blocks to store the chunk again), never after the session took it back."""

from __future__ import annotations

import threading

from storage_functions.daemon._collect import Waiter
from storage_functions.protocol import Frame, Op, Status


def _reply(status: int = Status.OK) -> Frame:
    return Frame(Op.REPLY, status, 0, "", {}, 0, 0, 0, 0)


def _armed(n: int) -> tuple[Waiter, list[tuple[bool, str]], threading.Event, list]:
    w = Waiter()
    cbs = []
    for i in range(n):
        w.add(0, i)
        cbs.append(w.callback(0, i))
    ran: list[tuple[bool, str]] = []
    done = threading.Event()

    def complete(stored: bool) -> None:
        ran.append((stored, threading.current_thread().name))
        done.set()

    assert w.then(complete)
    return w, ran, done, cbs


def test_the_last_stored_reply_completes_an_armed_put_on_its_own_thread() -> None:
    w, ran, _, cbs = _armed(3)
    cbs[0](_reply(), None)
    cbs[2](_reply(), None)
    assert ran == []
    cbs[1](_reply(), None)
    assert ran == [(True, threading.current_thread().name)]
    assert w.take() is None  # taken by the reply: the session cannot run it again


def test_a_failed_chunk_completes_an_armed_put_on_a_thread_of_its_own() -> None:
    w, ran, done, cbs = _armed(2)
    cbs[0](None, None)  # the function's connection was lost
    assert ran == []
    cbs[1](_reply(), None)
    assert done.wait(10)
    assert ran == [(False, "sion-put-retry")]
    assert w.wait(0) == [(0, 0)]


def test_a_put_taken_back_by_its_session_is_not_completed_by_a_late_reply() -> None:
    w, ran, _, cbs = _armed(1)
    run = w.take()
    assert run is not None
    cbs[0](_reply(), None)  # after its deadline
    assert ran == []
    run(False)
    assert ran == [(False, threading.current_thread().name)]


def test_a_waiter_whose_replies_are_all_in_cannot_be_armed() -> None:
    w = Waiter()
    w.add(0, 0)
    w.callback(0, 0)(_reply(Status.ERROR), None)
    assert not w.then(lambda stored: None)
    assert w.wait(0) == [(0, 0)]


def test_wait_done_until_the_completion_finished() -> None:
    w = Waiter()
    assert not w.wait_done(0)
    threading.Thread(target=w.finished).start()
    assert w.wait_done(10)


def test_past_its_timeout_a_put_names_exactly_the_chunks_whose_functions_did_not_answer() -> None:
    w = Waiter()
    cbs = {}
    for s, i in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]:
        w.add(s, i)
        cbs[s, i] = w.callback(s, i)
    for chunk in [(0, 0), (0, 2), (1, 0), (1, 2)]:
        cbs[chunk](_reply(), None)
    cbs[1, 1](None, None)  # failed
    assert w.wait(0) == [(0, 1), (1, 1)]  # (0, 1) never answered, (1, 1) failed: not the last chunk
    cbs[0, 1](_reply(), None)  # a late answer
    assert w.wait(0) == [(1, 1)]
