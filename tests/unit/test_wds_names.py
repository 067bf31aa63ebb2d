"""Names a workflow hands to the outside world: every entry gets a Lambda of its
own (``wds.lambda_name`` is not one-to-one, so validation refuses entries
that meet), and object names are safe storage keys, checked before a run."""

from __future__ import annotations

from typing import Any

import pytest

import sdk.deploy
import wds
from wds import CLEANUP_ENTRY, lambda_name, object_name_problem

from .test_wds_validation import doc, fn, issues_of


def two(a: str, b: str, **extra: Any) -> dict[str, Any]:
    return doc(("s", 0, [fn(a, ["in"], ["oa_{i}" if "{i}" in a else "oa"], [], start=True, handler="handlers:wa",
                            **({"replicas": 2} if "{i" in a else {})),
                         fn(b, ["in"], ["ob_{i}" if "{i" in b else "ob"], [], start=True, handler="handlers:wb",
                            **({"replicas": 2} if "{i" in b else {}))]), **extra)


def test_the_mapping_lives_in_wds_and_sdk_uses_it() -> None:
    assert sdk.deploy.lambda_name is wds.lambda_name
    assert lambda_name("word-count", "mapper_{i:02d}") == "word-count-mapper"
    assert lambda_name("x", "gen.a") == lambda_name("x", "gen-a") == "x-gen-a"


def test_entries_with_the_same_lambda_name_are_refused_naming_both() -> None:
    (issue,) = issues_of(two("gen.a", "gen-a"))
    assert issue.path == "$.spec.s.functions[1]"
    assert "entries 'gen.a' ($.spec.s.functions[0]) and 'gen-a' map to the same Lambda name 't-gen-a'" in issue.message
    assert "rename one" in issue.fix


@pytest.mark.parametrize(("a", "b"), [
    ("w_{i}", "w_{i:02d}"),      # templates are dropped
    ("w_{i}", "w"),              # ... and trailing '_'
    ("a b", "a+b"),              # any other character becomes '-'
    ("f" * 70 + "1", "f" * 70 + "2"),  # cut at 64
])
def test_other_clashes(a: str, b: str) -> None:
    (issue,) = issues_of(two(a, b))
    assert "map to the same Lambda name" in issue.message and f"entries '{a[:60]}" in issue.message


def test_distinct_lambda_names_pass() -> None:
    assert issues_of(two("gen.a", "gen.b")) == []
    assert issues_of(two("w_{i}", "v_{i}")) == []


def test_an_entry_may_not_take_the_cleanup_lambda() -> None:
    (issue,) = issues_of(two("funcsion.cleanup", "other"))
    assert f"which funcsion's cleanup task ({CLEANUP_ENTRY!r}) uses" in issue.message
    assert issue.path == "$.spec.s.functions[0]"


def test_an_app_name_that_leaves_no_room_cannot_be_mapped() -> None:
    issues = issues_of(two("a", "b", app="x" * 63))
    assert [i.path for i in issues] == ["$.app"]
    assert "leaves no room for the entry names" in issues[0].message and "at most 62" in issues[0].fix
    assert issues_of(two("a", "b", app="x" * 62)) == []


@pytest.mark.parametrize(("name", "problem"), [
    ("../../x", "contains '/'"),
    ("/etc/passwd", "contains '/'"),
    ("..", "starts with '.'"),
    (".hidden", "starts with '.'"),
    ("a..b", "contains '..'"),
    ("a b", "contains ' '"),
    ("caf\u00e9", "contains '\u00e9'"),
    ("a\\b", "contains '\\\\'"),
    ("x" * 201, "is 201 characters long"),
])
def test_unsafe_object_names(name: str, problem: str) -> None:
    assert problem in (object_name_problem(name) or "")
    (issue,) = issues_of(doc(("s", 0, [fn("w", ["in"], ["ok", name], [], start=True)])))
    assert issue.path == "$.spec.s.functions[0].output[1]"
    assert f"object name {name[:60]!r}"[:-1] in issue.message and problem in issue.message
    assert "letters, digits, '.', '_' and '-'" in issue.fix


@pytest.mark.parametrize("name", ["a", "a.b", "part-1_x", "x" * 200, "-x", "_0.9"])
def test_safe_object_names(name: str) -> None:
    assert object_name_problem(name) is None


def test_unsafe_declared_input() -> None:
    (issue,) = issues_of(doc(("s", 0, [fn("w", ["in"], ["o"], [], start=True)]), inputs=["in", "../up"]))
    assert issue.path == "$.inputs[1]" and "contains '/'" in issue.message


def test_unsafe_name_from_a_template_is_one_issue_not_one_per_replica() -> None:
    d = doc(("s", 0, [fn("w_{i}", ["in"], [".o_{i}"], [], start=True, replicas=500)]))
    (issue,) = issues_of(d)
    assert issue.path == "$.spec.s.functions[0].output[0] (replica 0)" and "'.o_0' starts with '.'" in issue.message


def test_unsafe_input_name_is_caught_at_validation() -> None:
    (issue,) = issues_of(doc(("s", 0, [fn("w", ["/etc/passwd"], ["o"], [], start=True)])))
    assert issue.path == "$.spec.s.functions[0].input[0]"


def test_the_batch_check_agrees_with_the_one_by_one_check() -> None:
    from wds._names import all_safe_object_names

    names = ["../../x", "/etc/passwd", "..", ".hidden", "a..b", "a b", "caf\u00e9", "a\nb", "a.\n.b", "x" * 201,
             "", "a", "a.b", "part-1_x", "x" * 200, "-x", "_0.9", "a."]
    for name in names:
        assert all_safe_object_names([name]) == (object_name_problem(name) is None), name
    assert all_safe_object_names(["a", "b.c", "x" * 200]) and all_safe_object_names([])
    assert not all_safe_object_names(["a", "b", "a.\n.b"]) and not all_safe_object_names(["a", ""])
