"""The planner against brute force: random state machines of Task chains, Parallels,
Choices and Catches (into handler Tasks, some then into a Fail state), run concretely on
every combination of outcomes (each Choice either way, each Task with a Catch succeeding
or failing) by a small interpreter written here (real JSON values, each Task's result a
unique marker string), must give the read counts, readers and kept-until-end flags the
planner derives without running anything."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sdk.asl_plan import plan

KEYS = ("k0", "k1", "k2")
ARN = "arn:aws:lambda:us-east-1:123456789012:function:f"


# -- random definitions --------------------------------------------------------------------

class _Names:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


@st.composite
def _task_fields(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    mode = draw(st.sampled_from(["all", "input_path", "parameters"]))
    if mode == "input_path":
        fields["InputPath"] = f"$.{draw(st.sampled_from(KEYS))}"
    elif mode == "parameters":
        picked = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True))
        fields["Parameters"] = {f"p_{k}.$": f"$.{k}" for k in picked}
    fields["ResultPath"] = draw(st.sampled_from([*(f"$.{k}" for k in KEYS), None]))
    return fields


def _chain(draw: st.DrawFn, names: _Names, depth: int, states: dict[str, Any], after: str | None,
           top: bool = True) -> str:
    """Add a random chain of segments to ``states`` that continues at ``after`` (None: ends its
    machine; ``top``: the top level, where a catcher may lead to a Fail state); returns its
    first state's name."""
    kinds = ["task"] + (["parallel", "choice"] if depth < 2 else [])
    segments = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=4 if depth == 0 else 2))
    nxt = after
    for kind in reversed(segments):
        link = {"Next": nxt} if nxt else {"End": True}
        if kind == "task":
            name = names("T")
            states[name] = {"Type": "Task", "Resource": ARN, **draw(_task_fields()), **link}
            if draw(st.integers(0, 3)) == 0:  # a Catch into a handler Task
                handler = names("H")
                then = draw(st.sampled_from(["on", "end", "fail"] if top else ["on", "end"]))
                if then == "fail":
                    failed = names("F")
                    states[failed] = {"Type": "Fail"}
                    handler_link: dict[str, Any] = {"Next": failed}
                else:
                    handler_link = link if then == "on" else {"End": True}
                states[handler] = {"Type": "Task", "Resource": ARN, **draw(_task_fields()), **handler_link}
                states[name]["Catch"] = [{"ErrorEquals": ["States.ALL"], "Next": handler,
                                          "ResultPath": draw(st.sampled_from([*(f"$.{k}" for k in KEYS), None]))}]
        elif kind == "parallel":
            name = names("P")
            branches = []
            for _ in range(draw(st.integers(1, 3))):
                inner: dict[str, Any] = {}
                start = _chain(draw, names, depth + 1, inner, None, top=False)
                branches.append({"StartAt": start, "States": inner})
            states[name] = {"Type": "Parallel", "Branches": branches,
                            "ResultPath": draw(st.sampled_from([*(f"$.{k}" for k in KEYS), None])), **link}
        else:
            name = names("C")
            starts = []
            for _ in range(2):
                if draw(st.booleans()):
                    starts.append(_chain(draw, names, depth + 1, states, nxt, top))
                else:  # an empty alternative: a Pass that goes straight on
                    p = names("S")
                    states[p] = {"Type": "Pass", **link}
                    starts.append(p)
            states[name] = {"Type": "Choice", "Choices": [{"Variable": "$.k0", "IsPresent": True, "Next": starts[0]}],
                            "Default": starts[1]}
        nxt = name
    assert nxt is not None
    return nxt


@st.composite
def definitions(draw: st.DrawFn) -> dict[str, Any]:
    states: dict[str, Any] = {}
    sink = None
    if draw(st.booleans()):  # end with a Pass whose Result replaces the state: nothing reaches the output
        sink = "Sink"
        states[sink] = {"Type": "Pass", "Result": "done", "End": True}
    start = _chain(draw, _Names(), 0, states, sink)
    return {"StartAt": start, "States": states}


# -- brute force: run it ------------------------------------------------------------------------

def _get(value: Any, path: str) -> Any:
    assert path.startswith("$.")
    return value[path[2:]]


def _markers(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value[1:-1]} if value.startswith("<") else set()
    if isinstance(value, dict):
        return set().union(*(_markers(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(_markers(v) for v in value)) if value else set()
    return set()


class _Failed(Exception):
    """The run reached a Fail state."""


def _run(states: dict[str, Any], start: str, value: Any, choose: dict[str, int],
         reads: dict[str, set[str]], log: list[str]) -> Any:
    """Run one machine on real JSON; ``reads[producer]`` collects the Tasks that received it
    and committed; ``log`` records results made ("made:<Task>") and errors ("error")."""
    name = start
    while True:
        s = states[name]
        if s["Type"] == "Choice":
            name = s["Choices"][0]["Next"] if choose[name] == 0 else s["Default"]
            continue
        if s["Type"] == "Fail":
            log.append("error")
            raise _Failed
        out = value
        if s["Type"] == "Pass" and "Result" in s:
            out = s["Result"]
        if s["Type"] == "Task":
            if "Catch" in s and choose[name] == 1:  # it fails: no commit, no result; on to its catcher
                log.append("error")
                catcher = s["Catch"][0]
                if catcher["ResultPath"] is not None:
                    value = copy.deepcopy(value)
                    value[catcher["ResultPath"][2:]] = {"Error": "States.TaskFailed"}
                name = catcher["Next"]
                continue
            effective = _get(value, s["InputPath"]) if "InputPath" in s else value
            if "Parameters" in s:
                effective = {k[:-2]: _get(effective, p) for k, p in s["Parameters"].items()}
            for producer in _markers(effective):
                reads[producer].add(name)
            reads[name] = set()
            log.append(f"made:{name}")
            result: Any = f"<{name}>"
        elif s["Type"] == "Parallel":
            result = [_run(b["States"], b["StartAt"], copy.deepcopy(value), choose, reads, log) for b in s["Branches"]]
        if s["Type"] in ("Task", "Parallel") and s["ResultPath"] is not None:
            out = copy.deepcopy(value)
            out[s["ResultPath"][2:]] = result
        if s.get("End"):
            return out
        name, value = s["Next"], out


def _decisions(states: dict[str, Any]) -> list[str]:
    """The states whose outcome a run chooses: Choices, and Tasks with a Catch (succeed or fail)."""
    out = []
    for name, s in states.items():
        if s["Type"] == "Choice" or "Catch" in s:
            out.append(name)
        for b in s.get("Branches", []):
            out += _decisions(b["States"])
    return out


def brute_force(d: dict[str, Any]) -> dict[str, tuple[int | None, set[str], bool]]:
    """Per Task, over every combination of outcomes: (read count, every reader, kept until the
    end), by the rules of ``sdk.asl_plan._plan`` applied to concrete runs: runs without an
    error after the result was made must agree; runs with one may read it fewer times, not more."""
    names = _decisions(d["States"])
    seen: dict[str, list[tuple[set[str], bool, bool]]] = {}  # producer -> (readers, error after it, in output)
    for outcome in itertools.product((0, 1), repeat=len(names)):
        reads: dict[str, set[str]] = {}
        log: list[str] = []
        try:
            final = _run(d["States"], d["StartAt"], {k: "input" for k in KEYS}, dict(zip(names, outcome)), reads, log)
            in_output = _markers(final)
        except _Failed:
            in_output = set()
        for producer, readers in reads.items():
            made = log.index(f"made:{producer}")
            seen.setdefault(producer, []).append((readers, "error" in log[made:], producer in in_output))
    out = {}
    for producer, runs in seen.items():
        ok = {len(r) for r, error, _ in runs if not error}
        errors = [len(r) for r, error, _ in runs if error]
        count: int | None = ok.pop() if len(ok) == 1 else max(errors, default=0) if not ok else None
        if count is not None and any(n > count for n in errors):
            count = None
        readers = set().union(*(r for r, _, _ in runs))
        out[producer] = (count, readers, count is None or count == 0 or any(o for _, _, o in runs))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(definitions())
def test_read_counts_equal_a_brute_force_run_of_every_path(d: dict[str, Any]) -> None:
    assume(len(_decisions(d["States"])) <= 9)  # at most 512 runs each: the brute force stays fast
    expected = brute_force(d)
    p = plan(d)
    got = {n: (s.read_count, set(s.readers), s.kept_until_end) for n, s in p.states.items()}
    assert got == expected, d


def test_the_brute_force_sees_what_it_should() -> None:
    # T1 -> parallel of two readers; the oracle itself must count 2 and keep nothing
    d = {"StartAt": "T1", "States": {
        "T1": {"Type": "Task", "Resource": ARN, "ResultPath": "$.k1", "Next": "P"},
        "P": {"Type": "Parallel", "ResultPath": None, "End": True, "Branches": [
            {"StartAt": f"R{i}", "States": {f"R{i}": {"Type": "Task", "Resource": ARN, "InputPath": "$.k1",
                                                     "ResultPath": None, "End": True}}} for i in range(2)]}}}
    assert brute_force(d)["T1"] == (2, {"R0", "R1"}, True)  # ResultPath null on P keeps $.k1 to the output
    assert plan(d).states["T1"].read_count == 2
