"""The video example's media steps, on files and numpy arrays (PyAV, which bundles
FFmpeg, and numpy); ``handlers.py`` moves their inputs and outputs through funcsion.

- ``split``: cut a clip into segments at keyframes, by remuxing its packets (no
  re-encoding, as Sprocket and ExCamera split), each segment a Matroska file;
- ``decode``: a segment to a *frame file*, raw RGB frames behind a small header
  (``FrameWriter`` / ``read_frames``), written and read one frame at a time;
- ``make_watermark`` / ``Watermark``: a logo image to an RGBA overlay, and its blend
  into the bottom-right corner of every frame;
- ``encode``: a frame file to H.264 in MP4, with per-segment statistics;
- ``concat``: the encoded segments to one MP4 by remuxing their packets on one
  timeline (no re-encoding), and ``thumbnail_sheet``: one small frame per segment as
  a PNG.

Frames are ``(height, width, 3)`` uint8 RGB arrays. Nothing here knows funcsion.
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import IO, Any, Protocol

try:
    import av
    import numpy as np
except ImportError as exc:  # say what to install, wherever this is imported (driver or task)
    raise ImportError(f"the video example needs PyAV and numpy ({exc}): pip install -e '.[examples]'") from exc

__all__ = ["FrameWriter", "read_frames", "read_header", "split", "decode", "make_watermark", "Watermark",
           "encode", "concat", "thumbnail_sheet", "png", "luma"]

MAGIC = b"FSFRAME1"
#: magic, width, height, frame count, fps numerator, fps denominator
HEADER = struct.Struct("<8sIIIII")
#: the codec of the encoded segments and the output
CODEC = "libx264"
X264 = {"crf": "20", "preset": "veryfast"}
#: containers written without dates or random ids: the same frames give the same bytes,
#: so a retried task writes what its first attempt wrote (objects are write-once)
BITEXACT = {"fflags": "+bitexact"}


class Readable(Protocol):
    def readinto(self, b: Any, /) -> int | None: ...


# -- frame files ------------------------------------------------------------------------

class FrameWriter:
    """Raw RGB frames to a seekable binary file; the frame count goes into the header
    when it closes."""

    def __init__(self, fh: IO[bytes], width: int, height: int, fps: Fraction) -> None:
        self.fh, self.width, self.height, self.fps, self.count = fh, width, height, Fraction(fps), 0
        fh.write(self._header())

    def _header(self) -> bytes:
        return HEADER.pack(MAGIC, self.width, self.height, self.count, self.fps.numerator, self.fps.denominator)

    def write(self, frame: np.ndarray) -> None:
        if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
            raise ValueError(f"frame of shape {frame.shape} {frame.dtype}; this file holds "
                             f"({self.height}, {self.width}, 3) uint8")
        self.fh.write(np.ascontiguousarray(frame).data)
        self.count += 1

    def close(self) -> None:
        end = self.fh.tell()
        self.fh.seek(0)
        self.fh.write(self._header())
        self.fh.seek(end)
        self.fh.flush()


def _read_exact(src: Readable, buf: bytearray | memoryview) -> int:
    view, got = memoryview(buf), 0
    while got < len(view):
        n = src.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def read_header(src: Readable) -> tuple[int, int, int, Fraction]:
    """(width, height, count, fps) of a frame file whose first bytes ``src`` gives."""
    head = bytearray(HEADER.size)
    if _read_exact(src, head) != HEADER.size:
        raise ValueError("not a frame file: shorter than its header")
    magic, w, h, n, num, den = HEADER.unpack(head)
    if magic != MAGIC:
        raise ValueError(f"not a frame file: magic {magic!r}")
    return w, h, n, Fraction(num, den)


def read_frames(src: Readable, width: int, height: int, count: int) -> Iterator[np.ndarray]:
    """The frames after the header, one at a time (each a fresh array)."""
    size = width * height * 3
    for k in range(count):
        buf = bytearray(size)
        if _read_exact(src, buf) != size:
            raise ValueError(f"frame file ends inside frame {k} of {count}")
        yield np.frombuffer(buf, np.uint8).reshape(height, width, 3)


def luma(frame: np.ndarray) -> float:
    """Mean BT.601 luma of an RGB frame (0-255)."""
    return float(frame.reshape(-1, 3).astype(np.float32).mean(axis=0) @ np.array([0.299, 0.587, 0.114]))


# -- split and decode -------------------------------------------------------------------

def _video(c: Any, path: str | Path) -> Any:
    if not c.streams.video:
        raise ValueError(f"{path}: no video stream (streams: {[s.type for s in c.streams]})")
    return c.streams.video[0]


def _cuts(keys: list[int], total: int, parts: int) -> list[int]:
    """Segment starts: for each equal share of ``total`` packets, the keyframe nearest to
    it after the previous start (a segment may be empty when keyframes are scarce)."""
    starts = [0]
    for k in range(1, parts):
        target = k * total / parts
        later = [i for i in keys if i > starts[-1]]
        starts.append(min(later, key=lambda i: abs(i - target)) if later else total)
    return starts + [total]


def split(src: str | Path, parts: int, out_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """Cut ``src`` into ``parts`` Matroska segments at keyframes: (manifest, paths)."""
    keys, total = [], 0
    with av.open(str(src)) as c:
        vs = _video(c, src)
        fps = vs.average_rate or vs.guessed_rate or Fraction(25)
        width, height, codec = vs.codec_context.width, vs.codec_context.height, vs.codec_context.name
        for pkt in c.demux(vs):
            if pkt.dts is None:  # the demuxer's flush packet
                continue
            if pkt.is_keyframe:
                keys.append(total)
            total += 1
    if total == 0:
        raise ValueError(f"{src}: the video stream has no frames")
    starts = _cuts(keys, total, parts)
    paths = [out_dir / f"segment_{k:04d}.mkv" for k in range(parts)]
    with av.open(str(src)) as c:
        vs = _video(c, src)
        outs = [av.open(str(p), "w", format="matroska", options=BITEXACT) for p in paths]
        try:
            streams = [o.add_stream_from_template(vs) for o in outs]
            seg, n = 0, 0
            for pkt in c.demux(vs):
                if pkt.dts is None:
                    continue
                while n >= starts[seg + 1]:
                    seg += 1
                pkt.stream = streams[seg]
                outs[seg].mux(pkt)
                n += 1
        finally:
            for o in outs:
                o.close()
    for p in paths:  # a segment with no packet was never written: an empty file stands for it
        p.touch()
    manifest = {"frames": total, "fps": [fps.numerator, fps.denominator], "width": width, "height": height,
                "source_codec": codec, "keyframes": len(keys),
                "segments": [{"start": starts[k], "frames": starts[k + 1] - starts[k]} for k in range(parts)]}
    return manifest, paths


def decode(segment: str | Path, out: IO[bytes]) -> int:
    """Decode a segment into a frame file on ``out``; the number of frames (an empty
    segment file gives an empty frame file)."""
    if Path(segment).stat().st_size == 0:
        FrameWriter(out, 0, 0, Fraction(1)).close()
        return 0
    with av.open(str(segment)) as c:
        vs = _video(c, segment)
        fps = vs.average_rate or vs.guessed_rate or Fraction(25)
        cc = vs.codec_context
        w = FrameWriter(out, cc.width, cc.height, fps)
        for frame in c.decode(vs):
            w.write(frame.to_ndarray(format="rgb24"))
        w.close()
    return w.count


# -- watermark --------------------------------------------------------------------------

def make_watermark(image: bytes, opacity: float = 0.6) -> np.ndarray:
    """An image PyAV can decode (PNG, JPEG, ...) to a float32 RGBA overlay in [0, 1],
    its alpha scaled by ``opacity``."""
    with av.open(io.BytesIO(image)) as c:
        frame = next(c.decode(video=0), None)
    if frame is None:
        raise ValueError("the logo image has no picture")
    rgba = frame.to_ndarray(format="rgba").astype(np.float32) / 255.0
    rgba[..., 3] *= opacity
    return rgba


def _fit(overlay: np.ndarray, width: int, height: int) -> np.ndarray:
    """The overlay scaled (nearest neighbour) to a fifth of the frame's width, at most a
    third of its height."""
    oh, ow = overlay.shape[:2]
    scale = min(width / 5 / ow, height / 3 / oh)
    tw, th = max(1, int(ow * scale)), max(1, int(oh * scale))
    rows = np.minimum((np.arange(th) / scale).astype(int), oh - 1)
    cols = np.minimum((np.arange(tw) / scale).astype(int), ow - 1)
    return overlay[rows][:, cols]


class Watermark:
    """Blend ``overlay`` into the bottom-right corner of ``width`` x ``height`` frames."""

    def __init__(self, overlay: np.ndarray, width: int, height: int) -> None:
        fit = _fit(overlay, width, height)
        th, tw = fit.shape[:2]
        margin = max(1, width // 40)
        self.y, self.x = max(0, height - th - margin), max(0, width - tw - margin)
        self.alpha = fit[..., 3:4]
        self.color = fit[..., :3] * 255.0 * self.alpha
        self.th, self.tw = th, tw

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        out = frame.copy()
        region = out[self.y:self.y + self.th, self.x:self.x + self.tw].astype(np.float32)
        out[self.y:self.y + self.th, self.x:self.x + self.tw] = np.clip(
            region * (1.0 - self.alpha) + self.color, 0, 255).round().astype(np.uint8)
        return out


# -- encode, concat, thumbnails ---------------------------------------------------------

def encode(src: Readable, out_path: str | Path) -> dict[str, Any]:
    """Encode the frame file ``src`` gives to H.264 in MP4 at ``out_path``: its
    statistics (frames, mean RGB and luma of the frames encoded). No frames: no file."""
    w, h, n, fps = read_header(src)
    stats: dict[str, Any] = {"frames": n, "width": w, "height": h, "fps": [fps.numerator, fps.denominator]}
    if n == 0:
        stats.update(mean_rgb=None, mean_luma=None)
        return stats
    total = np.zeros(3, np.float64)
    with av.open(str(out_path), "w", format="mp4", options=BITEXACT) as out:
        st = out.add_stream(CODEC, rate=fps)
        st.width, st.height, st.pix_fmt = w, h, "yuv420p"
        st.options = dict(X264)
        for k, frame in enumerate(read_frames(src, w, h, n)):
            total += frame.reshape(-1, 3).mean(axis=0)
            vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
            vf.pts = k
            out.mux(st.encode(vf))
        out.mux(st.encode(None))
    mean = total / n
    stats.update(mean_rgb=[round(float(v), 3) for v in mean],
                 mean_luma=round(float(mean @ np.array([0.299, 0.587, 0.114])), 3))
    return stats


def concat(segments: list[Path | None], out_path: str | Path) -> dict[str, Any]:
    """Join encoded segments (None: an empty one) into one MP4 by remuxing their packets,
    each segment's timestamps moved past the previous ones'. All must come from
    ``encode`` with one setting (the same H.264 parameters): checked, not assumed."""
    present = [p for p in segments if p is not None]
    if not present:
        raise ValueError("no segment has any frame: nothing to join")
    frames, offset_s = 0, Fraction(0)
    with av.open(str(present[0])) as first:
        template = first.streams.video[0]
        extradata = template.codec_context.extradata
        with av.open(str(out_path), "w", format="mp4", options=BITEXACT) as out:
            ost = out.add_stream_from_template(template)
            for path in present:
                with av.open(str(path)) as c:
                    vs = c.streams.video[0]
                    if vs.codec_context.extradata != extradata:
                        raise ValueError(f"segment {path.name} was encoded with other parameters than the first "
                                         "(its H.264 headers differ); encode every segment with one setting")
                    fps = vs.average_rate or vs.guessed_rate or Fraction(25)
                    n = 0
                    for pkt in c.demux(vs):
                        if pkt.dts is None:
                            continue
                        shift = int(offset_s / pkt.time_base)
                        if pkt.pts is not None:
                            pkt.pts += shift
                        pkt.dts += shift
                        pkt.stream = ost
                        out.mux(pkt)
                        n += 1
                frames += n
                offset_s += Fraction(n) / Fraction(fps)
    return {"frames": frames, "duration_s": float(offset_s)}


def png(frame: np.ndarray) -> bytes:
    """An RGB frame as PNG bytes."""
    cc = av.CodecContext.create("png", "w")
    cc.width, cc.height, cc.pix_fmt = frame.shape[1], frame.shape[0], "rgb24"
    packets = cc.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")) + cc.encode(None)
    return b"".join(bytes(p) for p in packets)


def thumbnail_sheet(thumbs: list[np.ndarray | None], step: int = 4) -> bytes:
    """One frame per segment, ``step`` times smaller, on a grid (black where a segment
    had none), as PNG."""
    shown = [t for t in thumbs if t is not None]
    if not shown:
        raise ValueError("no segment has any frame: no thumbnail to draw")
    th, tw = shown[0][::step, ::step].shape[:2]
    cols = math.ceil(math.sqrt(len(thumbs)))
    rows = math.ceil(len(thumbs) / cols)
    sheet = np.zeros((rows * th, cols * tw, 3), np.uint8)
    for k, t in enumerate(thumbs):
        if t is not None:
            small = t[::step, ::step][:th, :tw]
            r, c = divmod(k, cols)
            sheet[r * th:r * th + small.shape[0], c * tw:c * tw + small.shape[1]] = small
    return png(sheet)
