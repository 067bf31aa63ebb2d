"""Word count as a funcsion workflow (see wordcount.wds.json).

splitter cuts the text into one chunk per mapper on line boundaries; each
mapper counts its chunk and scatters the counts to the reducers by a stable
hash of the word; each reducer merges what the mappers sent it; the merger
joins the reducers' partial counts into ``word_counts``. Every handler learns
its objects from the workflow (``sdk.inputs()``, ``sdk.outputs()``), so the
fan-out is set by the WDS parameters alone.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter

import sdk

#: A word: a run of letters, digits or apostrophes, compared in lower case.
WORD = re.compile(r"[a-z0-9']+")


def count_words(text: str) -> Counter[str]:
    return Counter(WORD.findall(text.lower()))


def split_lines(text: str, parts: int) -> list[str]:
    """Cut ``text`` into ``parts`` pieces of about equal size, only at line ends."""
    lines = text.splitlines(keepends=True)
    target = max(1, len(text) // parts)
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        current.append(line)
        size += len(line)
        if size >= target and len(chunks) < parts - 1:
            chunks.append("".join(current))
            current, size = [], 0
    chunks.append("".join(current))
    chunks += [""] * (parts - len(chunks))
    return chunks


@sdk.task
def splitter(event: dict, context: object) -> dict:
    (source,) = sdk.inputs()
    text = sdk.get(source)
    outs = sdk.outputs()
    sdk.put_many(dict(zip(outs, split_lines(text, len(outs)))))
    return {"chunks": len(outs), "chars": len(text)}


@sdk.task
def mapper(event: dict, context: object) -> dict:
    (chunk,) = sdk.inputs()
    counts = count_words(sdk.get(chunk))
    outs = sdk.outputs()
    buckets: list[dict[str, int]] = [{} for _ in outs]
    for word, n in counts.items():
        buckets[zlib.crc32(word.encode()) % len(outs)][word] = n
    sdk.put_many({o: b for o, b in zip(outs, buckets)}, codec="msgpack")
    return {"words": sum(counts.values()), "distinct": len(counts)}


@sdk.task
def reducer(event: dict, context: object) -> dict:
    total: Counter[str] = Counter()
    for part in sdk.get_many(sdk.inputs()).values():
        total.update(part)
    (out,) = sdk.outputs()
    sdk.put(out, dict(total), codec="msgpack")
    return {"distinct": len(total)}


@sdk.task
def merger(event: dict, context: object) -> dict:
    total: Counter[str] = Counter()
    for part in sdk.get_many(sdk.inputs()).values():
        total.update(part)
    ranked = dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))
    (out,) = sdk.outputs()
    sdk.put(out, ranked)
    return {"distinct": len(ranked), "top": list(ranked)[:5]}
