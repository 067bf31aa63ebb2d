"""Read counts from a Step Functions state machine: for every Task state, which Task
states receive its result and how many times it will be read (issue 34, item 2).

    from sdk import asl_plan
    p = asl_plan.load("machine.asl.json")      # or asl_plan.plan(dict_or_json_text)
    p.states["Fetch"].read_count                # 2, or None where the flow is not static
    p.states["Fetch"].readers                   # ("Resize", "Index")
    p.states["Fetch"].kept_until_end            # False: freed at the last reader's commit
    p.to_dict()                                 # {"states": {name: {read_count, readers, kept_until_end, why}}}

The rules (Choice, Parallel, Map, Catch, Retry, the JSONPath fields, what is not
static) are in ``sdk.asl_plan._plan``'s docstring. A definition the planner cannot read
raises ``AslError`` naming the JSON path of the problem and the fix.

Standard library only, so the offload decorator can use it inside a Lambda; only
``render`` (``funcsion offload plan --picture``) imports matplotlib, when called.
Not here: the decorator, references and cleanup (the rest of issue 34).
"""

from __future__ import annotations

from ._definition import Definition, Machine, State, parse
from ._flow import MAX_ROUTES
from ._picture import FORMATS as PICTURE_FORMATS
from ._picture import render, to_dot
from ._plan import Plan, StatePlan, dumps, load, plan
from .exceptions import AslError

__all__ = ["AslError", "Definition", "MAX_ROUTES", "Machine", "PICTURE_FORMATS", "Plan", "State", "StatePlan", "dumps", "load", "parse",
           "plan", "render", "to_dot"]
