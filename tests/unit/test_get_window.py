"""The first-d window of one GET (``GetWindow``): replies and time in, chunk
requests, claims and fallbacks out; no sockets, no threads."""

from __future__ import annotations

from storage_functions.daemon._objects import Stripe
from storage_functions.daemon._window import GetWindow


def stripes(k: int, d: int = 2, p: int = 1) -> list[Stripe]:
    """``k`` stripes, chunk ``i`` of each on function ``i``."""
    return [Stripe(d, p, 10, 10 * d, 10, [0] * (d + p), [(i, 0, 0) for i in range(d + p)]) for _ in range(k)]


def deliver(w: GetWindow, s: int, i: int, now: float = 0.0) -> tuple[bool, bool]:
    claim, more, kick = w.reply(s, i, True, dead=False)
    assert claim and not more and not kick
    return w.arrived(s, i, now, claimed=True)


def test_window_requests_d_chunks_of_the_first_stripes_only() -> None:
    w = GetWindow(stripes(4), window=2)
    assert w.advance(0.0, dead=False) == [(0, [0, 1]), (1, [0, 1])]
    assert [r.state for r in w.recs] == ["asked", "asked", "idle", "idle"]


def test_writing_a_stripe_moves_the_window_and_the_last_chunk_ends_the_reply() -> None:
    w = GetWindow(stripes(3), window=1)
    w.advance(0.0, dead=False)
    assert deliver(w, 0, 0) == (False, False)
    assert deliver(w, 0, 1) == (False, False)
    assert w.recs[0].state == "done"
    assert w.written(0, 1.0, dead=False) == []          # one chunk of two written: the window stays
    assert w.written(0, 1.0, dead=False) == [(1, [0, 1])]
    for s in (1, 2):
        deliver(w, s, 0)
        last = deliver(w, s, 1)
        w.written(s, 2.0, dead=False)
        w.written(s, 2.0, dead=False)
    assert last == (False, True) and w.ended and w.left == 0


def test_a_failed_chunk_is_replaced_by_parity_at_once() -> None:
    w = GetWindow(stripes(1))
    w.advance(0.0, dead=False)
    assert w.reply(0, 1, False, dead=False) == (False, [2], False)
    assert w.waiting == {(0, 0): 0, (0, 2): 2}


def test_a_stripe_out_of_chunks_falls_back() -> None:
    w = GetWindow(stripes(1, d=2, p=0))
    w.advance(0.0, dead=False)
    assert w.reply(0, 0, False, dead=False) == (False, [], False)   # chunk 1 may still come
    assert w.reply(0, 1, False, dead=False) == (False, [], True)    # nothing left to ask: kick the watchdog
    fall, extra = w.check(0.1, straggler_s=1.0, timeout_s=5.0)
    assert fall == [0] and extra == [] and w.recs[0].state == "fallback"


def test_chunks_without_a_place_are_skipped_and_counted() -> None:
    sts = stripes(1)
    sts[0].places[0] = None  # its function was lost
    w = GetWindow(sts)
    assert w.advance(0.0, dead=False) == [(0, [1, 2])]
    assert w.missing == 1


def test_a_straggling_stripe_asks_the_rest_and_its_functions_go_last_later() -> None:
    w = GetWindow(stripes(2), window=1)
    w.advance(0.0, dead=False)
    deliver(w, 0, 0)
    fall, extra = w.check(0.5, straggler_s=0.2, timeout_s=5.0)   # chunk 1 (function 1) straggles
    assert fall == [] and extra == [(0, [2])] and w.slow == {1}
    deliver(w, 0, 2)
    w.written(0, 0.6, dead=False)
    assert w.written(0, 0.6, dead=False) == [(1, [0, 2])]       # function 1 goes last now
    assert w.reply(0, 1, True, dead=False) == (False, [], False)  # the straggler's chunk is surplus: drained


def test_a_timed_out_function_is_not_waited_on_twice() -> None:
    w = GetWindow(stripes(2, d=2, p=0), window=1)
    w.advance(0.0, dead=False)
    deliver(w, 0, 0)
    fall, _ = w.check(10.0, straggler_s=100.0, timeout_s=5.0)
    assert fall == [0] and w.hung == {1}
    w.arrived(0, 1, 10.5, claimed=False)   # the fallback's chunk from COS
    w.written(0, 11.0, dead=False)
    assert w.written(0, 11.0, dead=False) == []   # stripe 1 needs function 1 too: straight to the fallback
    assert w.fall_next == [1] and w.recs[1].state == "fallback"


def test_a_claim_that_outlasted_its_fallback_is_dropped() -> None:
    w = GetWindow(stripes(1))
    w.advance(0.0, dead=False)
    assert w.reply(0, 0, True, dead=False)[0]
    w.arrived(0, 1, 1.0, claimed=False)
    w.arrived(0, 2, 1.0, claimed=False)
    assert w.arrived(0, 0, 1.0, claimed=True) == (True, False)
    assert w.recs[0].claimed == 0 and w.recs[0].inflight == 1   # chunk 1's request is still out
    assert w.ended


def test_a_dead_client_requests_nothing_more_and_an_error_ends_once() -> None:
    w = GetWindow(stripes(2), window=1)
    assert w.advance(0.0, dead=True) == []
    assert w.end() and not w.end()


def test_chunks_on_functions_that_are_not_ready_are_asked_last_when_the_others_suffice() -> None:
    # d=2 of 4: function 0 is recovering (busy downloading); the GET asks functions 1 and 2
    st = [Stripe(2, 2, 10, 20, 10, [0] * 4, [(i, 0, 0) for i in range(4)])]
    w = GetWindow(st, ready=lambda fn: fn != 0)
    assert w.advance(0.0, dead=False) == [(0, [1, 2])]


def test_a_recovery_copy_is_asked_after_placed_chunks_on_ready_functions() -> None:
    # chunk 0 lost its place; a recovery function (7) holds a copy: asked only if needed
    st = [Stripe(2, 2, 10, 20, 10, [0] * 4, [None, (1, 0, 0), (2, 0, 0), (3, 0, 0)])]
    w = GetWindow(st, route=lambda s, i: 7 if i == 0 else None, ready=lambda fn: True)
    assert w.advance(0.0, dead=False) == [(0, [1, 2])]
    assert w.rerouted == 0


def test_functions_that_are_not_ready_are_still_asked_when_too_few_others_are() -> None:
    # d=2 of 3 and two of the functions are recovering: order stays, the stripe still completes
    w = GetWindow(stripes(1), ready=lambda fn: fn == 2)
    assert w.advance(0.0, dead=False) == [(0, [0, 1])]
