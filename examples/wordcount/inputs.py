"""Default input of the word-count example: Python's own pydoc topics
(about 460 KB of English text that ships with every CPython)."""

from __future__ import annotations


def default_inputs() -> dict[str, str]:
    from pydoc_data.topics import topics

    return {"raw_text": "\n\n".join(topics[k] for k in sorted(topics))}
