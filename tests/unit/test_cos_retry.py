"""COS base class and retry policy, with an in-memory backend and injected
sleep/clock/rng: no files, no sockets."""

from __future__ import annotations

import random

import pytest

from storage_functions.cos import COS, RetryPolicy, open_cos, validate_key
from storage_functions.cos._retry import RetryExhausted, call_with_retries
from storage_functions.exceptions import COSConfigError, COSError, COSNotFound, InvalidKey


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class Transient(Exception):
    pass


class MemCOS(COS):
    """The smallest backend: a dict, failing the next ``fail`` calls."""

    def __init__(self, fail: int = 0, exc: type[Exception] = Transient, **base: object) -> None:
        super().__init__(**base)  # type: ignore[arg-type]
        self.url = "mem://test"
        self.data: dict[str, bytes] = {}
        self.fail = fail
        self.exc = exc
        self.calls = 0

    def _maybe_fail(self) -> None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise self.exc("flaky")

    def _put(self, key, data):  # type: ignore[no-untyped-def]
        self._maybe_fail()
        self.data[key] = bytes(data)

    def _get(self, key):  # type: ignore[no-untyped-def]
        self._maybe_fail()
        if key not in self.data:
            raise COSNotFound(key)
        return self.data[key]

    def _get_range(self, key, start, length):  # type: ignore[no-untyped-def]
        return self._get(key)[start : start + length]

    def _delete(self, key):  # type: ignore[no-untyped-def]
        self.data.pop(key, None)

    def _list(self, prefix):  # type: ignore[no-untyped-def]
        return [k for k in self.data if k.startswith(prefix)]

    def _exists(self, key):  # type: ignore[no-untyped-def]
        return key in self.data

    def _is_transient(self, exc):  # type: ignore[no-untyped-def]
        return isinstance(exc, Transient)


def test_policy_delays_without_jitter_double_and_cap() -> None:
    p = RetryPolicy(max_attempts=8, base_delay_s=0.1, max_delay_s=0.5, jitter=False, deadline_s=100)
    rng = random.Random(0)
    assert [p.next_delay(a, 0.0, rng) for a in range(1, 9)] == [0.1, 0.2, 0.4, 0.5, 0.5, 0.5, 0.5, None]


def test_policy_full_jitter_stays_under_the_cap() -> None:
    p = RetryPolicy(max_attempts=100, base_delay_s=0.1, max_delay_s=1.0, deadline_s=1e9)
    rng = random.Random(42)
    for attempt in range(1, 50):
        d = p.next_delay(attempt, 0.0, rng)
        assert d is not None and 0 <= d <= min(1.0, 0.1 * 2 ** (attempt - 1))


def test_policy_gives_up_at_the_deadline() -> None:
    p = RetryPolicy(max_attempts=100, base_delay_s=1.0, max_delay_s=1.0, jitter=False, deadline_s=2.5)
    rng = random.Random(0)
    assert p.next_delay(1, 1.0, rng) == 1.0
    assert p.next_delay(2, 2.0, rng) is None


@pytest.mark.parametrize("field,value", [("max_attempts", 0), ("base_delay_s", -1), ("multiplier", 0.5)])
def test_policy_rejects_bad_values_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]


def test_call_with_retries_sleeps_between_attempts_and_returns() -> None:
    clock = FakeClock()
    outcomes = [Transient(), Transient(), "ok"]

    def fn() -> str:
        o = outcomes.pop(0)
        if isinstance(o, Exception):
            raise o
        return o

    p = RetryPolicy(base_delay_s=0.1, jitter=False)
    assert call_with_retries(fn, policy=p, is_transient=lambda e: isinstance(e, Transient),
                             sleep=clock.sleep, clock=clock) == "ok"
    assert clock.sleeps == [0.1, 0.2]


def test_call_with_retries_reraises_permanent_errors_at_once() -> None:
    clock = FakeClock()

    def fn() -> None:
        raise PermissionError("no")

    with pytest.raises(PermissionError):
        call_with_retries(fn, policy=RetryPolicy(), is_transient=lambda e: False, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []


def test_call_with_retries_exhausted_carries_the_last_error() -> None:
    clock = FakeClock()

    def fn() -> None:
        raise Transient("again")

    with pytest.raises(RetryExhausted) as info:
        call_with_retries(fn, policy=RetryPolicy(max_attempts=3, jitter=False), is_transient=lambda e: True,
                          sleep=clock.sleep, clock=clock)
    assert info.value.attempts == 3 and isinstance(info.value.last, Transient)
    assert len(clock.sleeps) == 2


def test_base_retries_transient_errors_and_counts_them() -> None:
    clock = FakeClock()
    cos = MemCOS(fail=2, sleep=clock.sleep, clock=clock, rng=random.Random(1))
    cos.put("a/b", b"xyz")
    assert cos.get("a/b") == b"xyz"
    s = cos.stats
    assert (s.puts, s.gets, s.retries, s.bytes_put, s.bytes_got, s.errors) == (1, 1, 2, 3, 3, 0)
    assert len(clock.sleeps) == 2


def test_base_wraps_exhausted_retries_in_cos_error_naming_op_key_and_url() -> None:
    clock = FakeClock()
    cos = MemCOS(fail=100, retry=RetryPolicy(max_attempts=4), sleep=clock.sleep, clock=clock)
    with pytest.raises(COSError, match=r"COS put of 'k' in mem://test failed after 4 attempts: Transient: flaky"):
        cos.put("k", b"")
    assert cos.calls == 4 and cos.stats.errors == 1 and cos.stats.puts == 0


def test_base_wraps_permanent_errors_without_retrying() -> None:
    cos = MemCOS(fail=1, exc=PermissionError, sleep=lambda s: pytest.fail("slept"))
    with pytest.raises(COSError, match="COS put of 'k' in mem://test failed: PermissionError") as info:
        cos.put("k", b"1")
    assert isinstance(info.value.__cause__, PermissionError)


def test_base_lets_not_found_through_unwrapped() -> None:
    cos = MemCOS()
    with pytest.raises(COSNotFound, match="nope") as info:
        cos.get("nope")
    assert isinstance(info.value, KeyError)
    assert cos.stats.errors == 0


@pytest.mark.parametrize("key", ["a", "a/b/c", "ü/∂ x", "x" * 1024, "a..b", ".hidden/f", "%obj", "%tmp/x"])
def test_valid_keys(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize("key,why", [
    ("", "empty"), ("/a", "segment"), ("a/", "segment"), ("a//b", "segment"), ("a/../b", "segment"),
    ("./a", "segment"), ("a\\b", "backslash"), ("a\nb", "control"), ("x" * 1025, "1024"),
    (b"a", "must be a str"), (None, "must be a str"),
])
def test_invalid_keys_explain(key: object, why: str) -> None:
    with pytest.raises(InvalidKey, match=why):
        validate_key(key)
    with pytest.raises(ValueError):
        MemCOS().put(key, b"")  # type: ignore[arg-type]


def test_put_refuses_non_bytes() -> None:
    with pytest.raises(TypeError, match="bytes-like"):
        MemCOS().put("k", "text")  # type: ignore[arg-type]


def test_get_range_refuses_negative_numbers() -> None:
    with pytest.raises(ValueError, match="start and length"):
        MemCOS().get_range("k", -1, 2)


def test_delete_prefix_refuses_the_whole_store() -> None:
    with pytest.raises(InvalidKey, match="whole store"):
        MemCOS().delete_prefix("")


@pytest.mark.parametrize("url,match", [
    ("ftp://x/y", "unknown scheme"), ("file://host/x", "local absolute path"), ("", "non-empty"),
    ("file:///tmp/x?color=red", "unknown option"), ("s3:///prefix", "name a bucket"),
    ("s3://b/p?color=red", "unknown option"),
])
def test_open_cos_rejects_bad_urls(url: str, match: str) -> None:
    with pytest.raises(COSConfigError, match=match):
        open_cos(url)


def test_s3_error_classification_without_network() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError

    from storage_functions.cos import S3COS

    class Client:
        def __init__(self) -> None:
            self.errors = [ClientError({"Error": {"Code": "SlowDown"}}, "PutObject"),
                           EndpointConnectionError(endpoint_url="http://x")]
            self.bodies: list[bytes] = []

        def put_object(self, Bucket: str, Key: str, Body: bytes) -> None:
            if self.errors:
                raise self.errors.pop(0)
            self.bodies.append(Body)

        def get_object(self, Bucket: str, Key: str) -> None:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetObject")

    clock = FakeClock()
    client = Client()
    cos = S3COS("bkt", "pre", client=client, sleep=clock.sleep, clock=clock)
    cos.put("k", memoryview(b"abc"))
    assert client.bodies == [b"abc"] and cos.stats.retries == 2
    with pytest.raises(COSError, match="AccessDenied"):
        cos.get("k")
    assert cos.url == "s3://bkt/pre"
