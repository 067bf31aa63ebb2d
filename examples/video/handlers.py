"""Video processing as a funcsion workflow (see video.wds.json and README.md).

``split_video`` cuts the clip into segments at keyframes (a scatter: one segment per
worker) and writes a manifest; ``prepare_watermark`` turns the logo into an RGBA overlay
that every ``filter_NN`` reads (a broadcast). Per segment, ``decode_NN`` decodes to raw
frames, ``filter_NN`` blends the watermark into each frame and ``encode_NN`` encodes
H.264 and measures the segment; ``thumbnails`` takes the first frame of every filtered
segment, and ``concat`` joins the encoded segments into ``output_video`` with a
``summary`` (aggregates). The media work is in ``media.py``.

Segments and frames are large: they travel as streams (``sdk.get(name, stream=True)``
into a file or straight into the frame reader; ``sdk.put(name, open(path, "rb"))``
out), so no task holds more than a frame or two in memory.
"""

from __future__ import annotations

import io
import tempfile
from fractions import Fraction
from pathlib import Path

import media  # first: it says what to install when PyAV or numpy is missing

import av
import numpy as np

import sdk


def bad_input(what: str, exc: Exception) -> sdk.FatalTaskError:
    """An input PyAV cannot use: the same bytes would fail again, so no retry."""
    return sdk.FatalTaskError(f"{what}: {type(exc).__name__}: {exc}", cause="BadInput")


def fetch(name: str, path: Path) -> Path:
    """Stream object ``name`` into the file ``path``."""
    with sdk.get(name, stream=True) as stream, open(path, "wb") as out:
        out.writelines(stream)  # one stripe at a time
    return path


def store(name: str, path: Path) -> None:
    """Stream the file ``path`` into object ``name``."""
    with open(path, "rb") as fh:
        sdk.put(name, fh)


@sdk.task
def split_video(event: dict, context: object) -> dict:
    (source,) = sdk.inputs()
    manifest_name, *segment_names = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            manifest, paths = media.split(fetch(source, work / "source"), len(segment_names), work)
        except (av.FFmpegError, ValueError) as exc:
            raise bad_input(f"input {source!r} is not a video PyAV can split", exc) from exc
        sdk.put(manifest_name, manifest)
        for name, path in zip(segment_names, paths):
            store(name, path)
    return {"frames": manifest["frames"], "keyframes": manifest["keyframes"],
            "segment_frames": [s["frames"] for s in manifest["segments"]]}


@sdk.task
def prepare_watermark(event: dict, context: object) -> dict:
    (logo,) = sdk.inputs()
    (out,) = sdk.outputs()
    with sdk.get(logo, stream=True) as stream:
        try:
            overlay = media.make_watermark(stream.read())
        except (av.FFmpegError, ValueError) as exc:
            raise bad_input(f"input {logo!r} is not an image PyAV can decode", exc) from exc
    buf = io.BytesIO()
    np.save(buf, overlay)
    sdk.put(out, buf.getvalue())
    return {"shape": list(overlay.shape)}


@sdk.task
def decode(event: dict, context: object) -> dict:
    (segment,) = sdk.inputs()
    (out,) = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with open(work / "frames", "w+b") as fh:
            n = media.decode(fetch(segment, work / "segment.mkv"), fh)
        store(out, work / "frames")
    return {"frames": n}


@sdk.task
def filter(event: dict, context: object) -> dict:  # the pipeline step's name (shadows the builtin here only)
    frames, overlay_name = sdk.inputs()
    (out,) = sdk.outputs()
    overlay = np.load(io.BytesIO(sdk.get(overlay_name)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "filtered"
        with sdk.get(frames, stream=True) as src, open(path, "wb") as fh:
            w, h, n, fps = media.read_header(src)
            writer = media.FrameWriter(fh, w, h, fps)
            if n:  # an empty segment has no frame to mark (and no size to fit the mark to)
                mark = media.Watermark(overlay, w, h)
                for frame in media.read_frames(src, w, h, n):
                    writer.write(mark(frame))
            writer.close()
        store(out, path)
    return {"frames": n}


@sdk.task
def encode(event: dict, context: object) -> dict:
    (filtered,) = sdk.inputs()
    stats_name, out = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "segment.mp4"
        with sdk.get(filtered, stream=True) as src:
            stats = media.encode(src, path)
        stats["bytes"] = path.stat().st_size if stats["frames"] else 0
        sdk.put(stats_name, stats)
        if stats["frames"]:
            store(out, path)
        else:
            sdk.put(out, b"")  # an empty segment (keyframes were scarce): nothing to encode
    return stats


@sdk.task
def thumbnails(event: dict, context: object) -> dict:
    firsts = []
    for name in sdk.inputs():
        with sdk.get(name, stream=True) as src:  # only the header and the first frame are read
            w, h, n, _ = media.read_header(src)
            firsts.append(next(media.read_frames(src, w, h, n), None))
    (out,) = sdk.outputs()
    sheet = media.thumbnail_sheet(firsts)
    sdk.put(out, sheet)
    return {"thumbnails": sum(t is not None for t in firsts), "bytes": len(sheet)}


@sdk.task
def concat(event: dict, context: object) -> dict:
    names = sdk.inputs()
    manifest = sdk.get(names[0])
    stats_names = [n for n in names if n.startswith("stats_")]
    encoded_names = [n for n in names if n.startswith("encoded_")]
    stats = [sdk.get(n) for n in stats_names]
    summary_name, out = sdk.outputs()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths: list[Path | None] = []
        for n, s in zip(encoded_names, stats):
            if s["frames"]:
                paths.append(fetch(n, work / f"{n}.mp4"))
            else:  # read it all the same: an input never read is held until the run ends
                sdk.get(n)
                paths.append(None)
        joined = media.concat(paths, work / "output.mp4")
        fps = Fraction(*manifest["fps"])
        frames = sum(s["frames"] for s in stats)
        summary = {
            "frames": joined["frames"], "duration_s": joined["duration_s"], "fps": float(fps),
            "width": manifest["width"], "height": manifest["height"], "codec": "h264",
            "bytes": (work / "output.mp4").stat().st_size,
            "source": {"frames": manifest["frames"], "codec": manifest["source_codec"],
                       "keyframes": manifest["keyframes"]},
            "mean_luma": round(sum(s["mean_luma"] * s["frames"] for s in stats if s["frames"]) / frames, 3),
            "segments": [{"index": k, "start": m["start"], "frames": s["frames"], "bytes": s["bytes"],
                          "mean_rgb": s["mean_rgb"], "mean_luma": s["mean_luma"]}
                         for k, (m, s) in enumerate(zip(manifest["segments"], stats))],
        }
        sdk.put(summary_name, summary)
        store(out, work / "output.mp4")
    return {"frames": summary["frames"], "duration_s": summary["duration_s"], "bytes": summary["bytes"]}
