"""Writing an upload's chunks in a second thread while the next chunk arrives."""

from __future__ import annotations

import queue
import threading

COALESCE_BYTES = 4 * 1024 * 1024
"""Queued chunks are joined into writes of up to this many bytes."""


class WriteBehind:
    """Writes an upload's chunks in a second thread.

    Each chunk is hashed as it is put, in the receiving thread (as a bare stream
    that only hashes would), and written and synced in the second thread, so
    receiving and hashing the next chunk overlaps writing this one; the bounded
    queue (``depth`` chunks) pushes back on the sender when the disk is slower
    than the network. An error from a write is raised by the next ``put`` or by
    ``finish``.
    """

    def __init__(self, upload, depth: int = 4):
        self.upload = upload
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(
            target=self._loop, name=f"push-{upload.digest[:12]}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        queued: list = []  # taken from the queue, not written yet (None: the end)
        while True:
            item = queued.pop(0) if queued else self._queue.get()
            if item is None:
                return
            offset, data = item
            # Chunks that queued up while the disk was busy go down as one write:
            # fewer, larger O_DIRECT writes keep a slow disk's queue fuller.
            parts = [data]
            size = len(data)
            while not queued and size < COALESCE_BYTES:
                try:
                    following = self._queue.get_nowait()
                except queue.Empty:
                    break
                if following is None or following[0] != offset + size:
                    queued.append(following)
                    break
                parts.append(following[1])
                size += len(following[1])
            if self.error is not None:
                continue  # drain without writing past a failed chunk
            joined = parts[0] if len(parts) == 1 else b"".join(parts)
            try:
                self.upload.write(offset, joined, hashed=True)
            except BaseException as e:
                self.error = e

    def put(self, offset: int, data: bytes) -> None:
        """Queue one chunk (blocks while ``depth`` chunks wait)."""
        if self.error is not None:
            raise self.error
        self.upload.hash_ahead(data)
        self._queue.put((offset, data))

    def finish(self) -> None:
        """Write what is queued, stop the thread, raise the first write error if any."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise self.error
