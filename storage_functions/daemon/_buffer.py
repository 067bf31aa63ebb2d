"""The persistent buffer (SION Sec. 5.3.2): each version's chunks go to a
file on the daemon's disk while they stream to the functions; a PUT returns
when both hold them, and uploader threads copy the file to COS behind it,
retrying until it lands. A version freed before its upload started is never
uploaded; one freed during its upload is deleted from COS right after.
Covers the files, the upload queue and retries; not the wire.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import IO, Any, Callable

from ..private_files import open_private, private_dir
from ._objects import ObjectVersion

__all__ = ["PersistentBuffer"]

log = logging.getLogger("storage_functions.daemon")


class PersistentBuffer:
    def __init__(self, directory: str, cos: Any, *, workers: int = 2, delay_s: float = 0.0,
                 fsync: bool = False, max_backoff_s: float = 5.0,
                 on_uploaded: Callable[[ObjectVersion], None] | None = None) -> None:
        self.dir = directory
        private_dir(directory)
        self.cos = cos
        self.delay_s = delay_s
        self.fsync = fsync
        self.max_backoff_s = max_backoff_s
        self.on_uploaded = on_uploaded  # the durable table's record of the COS copy
        self._q: queue.Queue[tuple[float, ObjectVersion] | None] = queue.Queue()
        self._idle = threading.Condition()
        self._outstanding = 0
        self.uploads = 0
        self.skipped = 0
        self.retries = 0
        self.paused = threading.Event()
        self.paused.set()  # set = running
        self._workers = [threading.Thread(target=self._run, daemon=True, name=f"upload-{i}")
                         for i in range(workers if cos is not None else 0)]
        for t in self._workers:
            t.start()

    def path_for(self, obj: ObjectVersion) -> str:
        safe = obj.cos_key.replace("/", "_")
        return os.path.join(self.dir, f"{safe}.buf")

    @staticmethod
    def create(path: str) -> IO[bytes]:
        """A new buffer file (0600, in a 0700 directory: it holds a workflow's data)."""
        return open_private(path, "wb")

    def submit(self, obj: ObjectVersion) -> None:
        if self.cos is None:
            return
        with self._idle:
            self._outstanding += 1
        self._q.put((time.monotonic() + self.delay_s, obj))

    def discard(self, obj: ObjectVersion) -> None:
        """The version was freed: never upload it, drop its file, and remove
        its COS copy if it already got there."""
        with obj.lock:
            obj.state = "freed"
            path, obj.buffer_path = obj.buffer_path, None
            uploaded = obj.uploaded
        if path:
            _unlink(path)
        if uploaded and self.cos is not None:
            try:
                self.cos.delete(obj.cos_key)
            except Exception as exc:  # noqa: BLE001
                log.warning("COS delete of %s failed: %r", obj.cos_key, exc)

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._outstanding == 0, timeout)

    def close(self) -> None:
        for _ in self._workers:
            self._q.put(None)
        for t in self._workers:
            t.join(5)

    def _done(self) -> None:
        with self._idle:
            self._outstanding -= 1
            self._idle.notify_all()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            due, obj = item
            try:
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.paused.wait()
                self._upload(obj)
            finally:
                self._done()

    def _upload(self, obj: ObjectVersion) -> None:
        backoff = 0.05
        while True:
            with obj.lock:
                if obj.state == "freed" or obj.buffer_path is None:
                    self.skipped += 1
                    return
                obj.uploading = True
                path = obj.buffer_path
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                self.cos.put(obj.cos_key, data)
                break
            except Exception as exc:  # noqa: BLE001 - retry whatever COS raised
                self.retries += 1
                log.warning("upload of %s failed (%r); retrying in %.2fs", obj.cos_key, exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
            finally:
                with obj.lock:
                    obj.uploading = False
        self.uploads += 1
        with obj.lock:
            obj.uploaded = True
            freed = obj.state == "freed"
            path2, obj.buffer_path = obj.buffer_path, None
        if path2:
            _unlink(path2)
        if self.on_uploaded is not None and not freed:
            self.on_uploaded(obj)
        if freed:
            try:
                self.cos.delete(obj.cos_key)
            except Exception as exc:  # noqa: BLE001
                log.warning("COS delete of %s failed: %r", obj.cos_key, exc)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
