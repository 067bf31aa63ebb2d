"""Default input of the word-count example: Python's own pydoc topics
(about 460 KB of English text that ships with every CPython)."""

from __future__ import annotations

#: ``raw_text`` is read as text: ``funcsion run --input raw_text=FILE`` refuses a file that is
#: not UTF-8 before the run starts, naming the first bad byte's offset
INPUT_ENCODINGS = {"raw_text": "utf-8"}


def default_inputs() -> dict[str, str]:
    from pydoc_data.topics import topics

    return {"raw_text": "\n\n".join(topics[k] for k in sorted(topics))}
