"""A task that never holds its large input in memory: it streams the input to a
temporary file, hashing it as it goes, and puts the file back as its output."""

import hashlib
import tempfile

import sdk


@sdk.task
def copier(event, context):
    digest = hashlib.sha256()
    with tempfile.TemporaryFile() as tmp:
        with sdk.get("blob", stream=True) as stream:
            for piece in stream:
                digest.update(piece)
                tmp.write(piece)
        tmp.seek(0)
        sdk.put("copy", tmp)
    return {"sha256": digest.hexdigest(), "size": stream.size}
