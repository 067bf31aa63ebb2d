"""Pocket's extras end to end: the producer leaves ad-hoc notes (one per line of
its input) and persists its summary; the consumer reads each note once with
delete=True and writes the result."""

import sdk


@sdk.task
def producer(event, context):
    lines = sdk.get("src").splitlines()
    for i, line in enumerate(lines):
        sdk.put(f"note/{i}", line.upper(), adhoc=True)
    sdk.put("summary", {"notes": len(lines), "chars": sum(map(len, lines))}, persist=True)
    return {"notes": len(lines)}


@sdk.task
def consumer(event, context):
    summary = sdk.get("summary")
    notes = [sdk.get(f"note/{i}", delete=True) for i in range(summary["notes"])]
    sdk.put("result", {"summary": summary, "notes": notes})
    return {"ok": True}
