"""Run-scoped data tokens: minted from the store token, checked without state."""

from __future__ import annotations

import pytest

from storage_functions.auth import cos_in_scope, in_scope, mint_run_token, token_scope

SECRET = "s3cret-store-token"


def test_store_token_reaches_everything_and_run_tokens_their_run() -> None:
    assert token_scope(SECRET, SECRET) == ""
    tok = mint_run_token(SECRET, "r-7")
    assert tok.startswith("run:r-7:")
    assert token_scope(tok, SECRET) == "r-7/"
    assert in_scope("r-7/", "r-7/counts_00") and not in_scope("r-7/", "r-70/counts_00")
    assert not in_scope("r-7/", "r-8/x")


@pytest.mark.parametrize("bad", [
    "", "run:", "run:r-7", "run:r-7:", "nope", SECRET + "x",
    "run:r-8:" + mint_run_token(SECRET, "r-7").rsplit(":", 1)[1],     # another run's mac
    mint_run_token("other-secret", "r-7"),                              # another store's token
    "run:r-7/../r-8:" + "0" * 64,
])
def test_forged_or_foreign_tokens_get_nothing(bad: str) -> None:
    assert token_scope(bad, SECRET) is None


def test_minting_needs_a_secret_and_a_plain_run_id() -> None:
    for secret, run in (("", "r-1"), (SECRET, ""), (SECRET, "a/b"), (SECRET, "a:b")):
        with pytest.raises(ValueError):
            mint_run_token(secret, run)


def test_endpoints_for_a_task_carry_only_that_runs_token() -> None:
    from sdk import Endpoints

    ep = Endpoints("127.0.0.1:1", "127.0.0.1:2", SECRET, "admin", "file:///tmp/cos")
    task = ep.for_run("r-3")
    assert task.admin_token == "" and "admin" not in task.to_dict().values()
    assert token_scope(task.store_token, SECRET) == "r-3/"
    assert task.for_run("r-3") == task            # already scoped: unchanged


@pytest.mark.parametrize("bad", ["tökén", "\ud800", "run:r-7:\udfff", 7, None, ["t"], b"s3cret-store-token"])
def test_tokens_that_are_not_plain_strings_get_nothing(bad: object) -> None:
    assert token_scope(bad, SECRET) is None


def test_cos_objects_are_scoped_by_kind_and_run() -> None:
    assert cos_in_scope("r-7/", "tier/r-7/x") and cos_in_scope("r-7/", "persisted/r-7/x")
    assert cos_in_scope("r-7/", "outputs/r-7/x") and cos_in_scope("", "outputs/r-8/x")
    for key in ("tier/r-8/x", "tier/r-70/x", "sion/r-7/x", "tier/r-7", "r-7/x", "persisted"):
        assert not cos_in_scope("r-7/", key), key
    assert not cos_in_scope("", "sion/objects/k-r-7%2Fx/00000001")   # the daemon's own: nobody's
