"""funcstore releases an object's function memory once its last declared reader has the bytes
(the read answered as the last, then that reader's ``ReadDone``) and frees the object (its
durable copy) at its last reader's commit; ``funcstore:commit`` keeps the memory until the
commit, as the paper does. The pure core, on FuncStore's Fig. 9 workflow: ``a`` is read by F3
and F6."""

from __future__ import annotations

import pytest

from funcsion_rpc import errors as E
from metadata_server import DropObject, Freed, ReadRecorded, parse_policy, reply
from metadata_server._events import RELEASED_AT_READ, LastRead, Released
from storage_functions.daemon._control import RELEASED_AT_READ as DAEMON_RELEASED_AT_READ


def _drops(out) -> list[DropObject]:
    return [i for i in out if isinstance(i, DropObject)]


def _to_a(d, policy: str = "funcstore") -> str:
    r = d.start(d.key, policy)
    d.put(r, "", "in1", 10)
    d.put(r, "", "in2", 10)
    d.get(r, "F1", "in1")
    d.put(r, "F1", "a", 900)                   # a slice of a block of 1000 B
    return r


def test_the_last_declared_read_releases_memory_and_the_last_commit_frees(d):
    r = _to_a(d)
    run = d.state.runs[r]
    extents = d.state.lookup(r, "a")["placement"].extents
    live, alloc = run.live_bytes, d.state.allocator.owner_bytes(r)
    assert extents
    out = d.get(r, "F3", "a")                  # one of two readers: nothing goes
    assert not _drops(out) and run.live_bytes == live
    d.advance(1.0)
    for _ in range(2):                         # F3 crashed after reading and re-ran: still one reader
        assert not _drops(d.get(r, "F3", "a"))
    assert d.state.lookup(r, "a")["released_at"] is None
    d.advance(1.0)
    out = d.get(r, "F6", "a")                  # the last declared reader: told so, nothing goes yet
    assert reply(out, ReadRecorded).placement.extents == extents      # the reader fetches from there
    assert [i.object for i in out if isinstance(i, LastRead)] == ["a"] and not _drops(out)
    assert run.live_bytes == live and d.state.lookup(r, "a")["released_at"] is None
    assert not d.read_done(r, "F3", ["a"]) and not d.read_done(r, "F4", ["a", "nope"])   # not theirs
    d.advance(0.5)
    out = d.read_done(r, "F6", ["a"])          # F6 has the bytes: the memory goes now
    assert [(i.object, i.reason, i.keep_cos, i.extents) for i in _drops(out)] == [
        ("a", RELEASED_AT_READ, True, extents)]
    assert [i.object for i in out if isinstance(i, Released)] == ["a"]
    assert not [i for i in out if isinstance(i, Freed)]
    st = d.state.lookup(r, "a")
    assert st["state"] == "readable" and st["released_at"] == d.now and st["remaining"] == 2
    assert st["placement"].tier == "memory" and st["placement"].extents == ()   # what it held may be reused
    assert run.live_bytes == live - 900 and d.state.allocator.owner_bytes(r) <= alloc
    others = {(e.function, e.block) for o in run.objects.values() for e in o.placement.extents}
    assert all((e.function, e.block) not in d.state.allocator.used for e in extents
               if (e.function, e.block) not in others)             # its block went unless shared
    d.state.validate_state()
    assert not d.read_done(r, "F6", ["a"])     # a repeat changes nothing
    d.advance(1.0)
    out = d.get(r, "F6", "a")                  # F6 crashed after its read and re-ran
    again = reply(out, ReadRecorded)
    assert not again.recorded and again.placement.extents == () and len(out) == 1   # from the durable copy
    assert not _drops(d.get(r, "F3", "a"))
    assert "a" not in {i.object for i in d.put(r, "F3", "c", 30) if isinstance(i, Freed)}   # F6 to come
    assert d.state.lookup(r, "a")["remaining"] == 1
    out = d.put(r, "F6", "result", 10)         # F6 commits: the object goes, its durable copy too
    assert "a" in {i.object for i in out if isinstance(i, Freed)}
    drop = next(i for i in _drops(out) if i.object == "a")
    assert (drop.reason, drop.keep_cos, drop.extents, drop.tier) == ("committed", False, (), "memory")
    assert d.state.lookup(r, "a")["state"] == "freed"
    assert reply(d.get(r, "F6", "a"), ReadRecorded).already_committed   # a retry after the commit
    d.end(r)
    d.state.validate_state()


def test_the_trace_oracle_and_the_model_agree_on_a_released_object(d):
    r = _to_a(d)
    run = d.state.runs[r]
    d.advance(1.0)
    d.get(r, "F3", "a")
    d.advance(2.0)
    d.get(r, "F6", "a")                        # a: readable for 3 s up to its last read
    d.advance(0.5)
    d.read_done(r, "F6", ["a"])
    before = run.trace_oracle_byte_s()
    d.advance(5.0)                              # readers compute: a holds no memory meanwhile
    d.put(r, "F3", "c", 30)
    assert run.written_bytes == sum(o.size for o in run.objects.values()
                                    if o.state == "readable" and o.released_at is None)
    assert run.trace_oracle_byte_s() - before == pytest.approx(0.0)    # nothing more of a's
    d.end(r)


def test_at_commit_keeps_the_memory_until_the_last_commit(d):
    r = _to_a(d, "funcstore:commit")
    run = d.state.runs[r]
    live = run.live_bytes
    extents = d.state.lookup(r, "a")["placement"].extents
    d.get(r, "F3", "a")
    out = d.get(r, "F6", "a") + d.read_done(r, "F6", ["a"])
    assert not _drops(out) and not [i for i in out if isinstance(i, LastRead)]
    assert run.live_bytes == live and d.state.lookup(r, "a")["released_at"] is None
    d.put(r, "F3", "c", 30)
    assert run.summary()["policy"] == "funcstore:commit" and run.live_bytes == live + 30
    out = d.put(r, "F6", "result", 10)
    drop = next(i for i in _drops(out) if i.object == "a")
    assert (drop.reason, drop.extents) == ("committed", extents)
    d.end(r)


def test_a_reader_that_dies_before_it_has_the_bytes_leaves_the_memory_held(d):
    r = _to_a(d)
    run = d.state.runs[r]
    d.get(r, "F3", "a")
    d.get(r, "F6", "a")                        # F6's last read; it dies before reporting
    live = run.live_bytes
    out = d.get(r, "F6", "a")                  # its re-run is told again, reads the memory
    assert [i.object for i in out if isinstance(i, LastRead)] == ["a"] and run.live_bytes == live
    assert [i.object for i in d.read_done(r, "F6", ["a"]) if isinstance(i, Released)] == ["a"]
    d.end(r)


def test_a_released_object_left_at_the_run_end_goes_with_it(d):
    r = _to_a(d)
    d.get(r, "F3", "a")
    d.get(r, "F6", "a")
    d.read_done(r, "F6", ["a"])
    out = d.end(r, "failed")
    drop = next(i for i in _drops(out) if i.object == "a")
    assert drop.extents == () and drop.tier == "memory" and not drop.keep_cos
    d.state.validate_state()                    # nothing leaks


@pytest.mark.parametrize("spec", ["funcstore:commit", "funcstore:nogroup:commit", "funcstore:expiry:300:commit",
                                  "funcstore:lifetime:commit"])
def test_commit_variants_parse_and_print(spec):
    p = parse_policy(spec)
    assert p.at_commit and not p.releases_at_read and parse_policy(p.spec) == p
    assert parse_policy(spec.removesuffix(":commit")).releases_at_read


@pytest.mark.parametrize("spec", ["funcstore:commit:commit", "pocket:commit", "oracle:commit", "jiffy:5:commit"])
def test_commit_is_only_a_funcstore_variant(spec):
    with pytest.raises(E.InvalidRequest, match="keep memory until the last commit"):
        parse_policy(spec)


def test_the_daemon_matches_the_servers_reason():
    assert DAEMON_RELEASED_AT_READ == RELEASED_AT_READ


def test_a_snapshot_from_before_the_release_restores_with_its_defaults(d):
    """An older server's snapshot holds object records without ``released_at`` and
    ``fetching``: restored, they read as not released (an upgrade carries on)."""
    from metadata_server import MetadataState
    from metadata_server._snapshot import decode_snapshot, encode_snapshot, restore_into

    r = _to_a(d)
    _, fields = decode_snapshot(encode_snapshot(d.state, 1))
    for rec in fields["runs"][r].objects.values():   # as an older version pickled them
        del rec.released_at
        del rec.fetching
    fresh = MetadataState(block_size=1000)
    restore_into(fresh, fields)
    assert fresh.lookup(r, "a")["released_at"] is None and fresh.runs[r].objects["a"].fetching is None
    fresh.validate_state()


def test_the_config_takes_the_commit_variants(tmp_path):
    from sdk._config import Config, ConfigError

    for spec in ("funcstore:commit", "funcstore:nogroup:commit", "funcstore:expiry:300:commit"):
        assert Config.load(state_dir=str(tmp_path), env={}, policy=spec).policy == spec
    with pytest.raises(ConfigError, match="with :commit"):
        Config.load(state_dir=str(tmp_path), env={}, policy="pocket:commit")
