"""The video example end to end on the local stack: a clip drawn with numpy and encoded
with PyAV is split into segments at keyframes, decoded, watermarked, encoded and joined;
the output decodes with every frame, in order, with the watermark in its corner, and the
summary agrees with it. A missing PyAV or numpy fails these tests."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sdk.local._executor import ExecutorOptions
from sdk.local._run import run_workflow
from sdk.local._stack import Stack

from .examples import EXAMPLES, check_freed, funcsion_run, load, output, require_modules

VIDEO = EXAMPLES / "video" / "video.wds.json"


@pytest.fixture(scope="module", autouse=True)
def packages() -> None:
    require_modules("video", "av", "numpy")


def decoded(data: bytes) -> tuple[list[Any], float]:
    """The frames (RGB arrays) of an MP4 and its duration in seconds."""
    import av

    with av.open(io.BytesIO(data)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
        return frames, float(c.duration or 0) / 1e6


def luma(frames: list[Any]) -> float:
    import numpy as np

    return float(np.mean([f.reshape(-1, 3).mean(axis=0) @ np.array([0.299, 0.587, 0.114]) for f in frames]))


def outputs(cos_url: str, report: dict[str, Any]) -> tuple[dict[str, Any], bytes, bytes]:
    return (json.loads(output(cos_url, report, "summary")), output(cos_url, report, "output_video"),
            output(cos_url, report, "thumbnail_sheet"))


@pytest.mark.slow
def test_default_clip_is_split_watermarked_and_joined(stack: Stack) -> None:
    import numpy as np

    r = run_workflow(VIDEO, config=stack.config, stack=stack, options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    d = r.to_dict()
    check_freed(d)
    assert d["objects"]["watermark"]["declared_reads"] == 6  # the broadcast: one object, every filter reads it
    assert all(d["objects"][f"frames_{k:02d}"]["size"] > 1 << 20 for k in range(6))  # streamed, erasure-coded
    summary, video, sheet = outputs(stack.config.resolved_cos_url, d)
    frames, duration = decoded(video)
    assert len(frames) == summary["frames"] == 96 and duration == pytest.approx(4.0, abs=0.05)
    assert [s["frames"] for s in summary["segments"]] == [16] * 6
    assert frames[0].shape == (240, 320, 3)
    # a pixel statistic: the output's mean luma is the encoder's input's, up to coding loss
    assert luma(frames) == pytest.approx(summary["mean_luma"], abs=3.0)
    # the watermark is in every frame's corner: brighter there than in the source clip
    inputs, media = load("video", "inputs"), load("video", "media")
    mark = media.Watermark(media.make_watermark(inputs.logo()), 320, 240)
    box = (slice(mark.y, mark.y + mark.th), slice(mark.x, mark.x + mark.tw))
    source = list(inputs.frames(4, 320, 240, 24))
    gain = [float(o[box].mean()) - float(s[box].mean()) for o, s in zip(frames, source)]
    assert min(gain) > 10, gain
    # and nowhere else: away from the corner the output is the source, up to coding loss
    rest = (slice(0, mark.y), slice(0, 320))
    assert float(np.mean([abs(float(o[rest].mean()) - float(s[rest].mean())) for o, s in zip(frames, source)])) < 3
    assert decoded_png_shape(sheet) == (120, 240, 3)  # 6 thumbnails, 3 a row, a quarter of the size


def decoded_png_shape(data: bytes) -> tuple[int, ...]:
    import av

    with av.open(io.BytesIO(data)) as c:
        return tuple(next(c.decode(video=0)).to_ndarray(format="rgb24").shape)


@pytest.mark.slow
def test_a_larger_clip_through_the_command_line(tmp_path: Path) -> None:
    r = funcsion_run(VIDEO, tmp_path / "state", "--param", "segments=8", "--param", "seconds=8",
                     "--param", "width=480", "--param", "height=272")
    assert r["status"] == "succeeded", r["error"]
    check_freed(r)
    summary, video, _ = outputs(f"file://{tmp_path / 'state' / 'cos'}", r)
    frames, duration = decoded(video)
    assert len(frames) == summary["frames"] == 192 and duration == pytest.approx(8.0, abs=0.05)
    assert frames[0].shape == (272, 480, 3) and len(summary["segments"]) == 8
    assert luma(frames) == pytest.approx(summary["mean_luma"], abs=3.0)


@pytest.mark.slow
def test_a_clip_with_one_keyframe_keeps_every_frame(stack: Stack, tmp_path: Path) -> None:
    """Segments start at keyframes: a clip with one keyframe gives one segment with every
    frame and empty ones after it, and the output still has every frame."""
    import av

    inputs = load("video", "inputs")
    clip = tmp_path / "longgop.mkv"
    with av.open(str(clip), "w", format="matroska") as out:
        st = out.add_stream("mpeg4", rate=30)
        st.width, st.height, st.pix_fmt = 176, 144, "yuv420p"
        st.codec_context.gop_size = 1000
        st.options = {"sc_threshold": "1000000000"}  # no keyframe at scene changes either
        for k, img in enumerate(inputs.frames(2, 176, 144, 30)):
            vf = av.VideoFrame.from_ndarray(img, format="rgb24")
            vf.pts = k
            out.mux(st.encode(vf))
        out.mux(st.encode(None))
    r = run_workflow(VIDEO, config=stack.config, stack=stack, inputs={"video": str(clip)}, params={"segments": 4},
                     options=ExecutorOptions(progress=False))
    assert r.status == "succeeded", r.error
    check_freed(r.to_dict())
    summary, video, _ = outputs(stack.config.resolved_cos_url, r.to_dict())
    assert [s["frames"] for s in summary["segments"]] == [60, 0, 0, 0]
    assert summary["source"] == {"frames": 60, "codec": "mpeg4", "keyframes": 1}
    assert len(decoded(video)[0]) == 60


def test_a_file_that_is_no_video_fails_once_with_the_cause(stack: Stack, tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("not a video\n")
    r = run_workflow(VIDEO, config=stack.config, stack=stack, inputs={"video": str(bad)},
                     options=ExecutorOptions(progress=False))
    assert r.status == "failed" and r.failed_task == "split_video"
    assert r.tasks["split_video"]["attempts"] == 1  # no retry can fix it
    assert "input 'video' is not a video PyAV can split: InvalidDataError" in (r.error or "")
    assert r.memory["leaked_bytes"] == 0


def test_media_steps_write_the_same_bytes_twice(tmp_path: Path) -> None:
    """Objects are write-once: a task retried after some of its writes must write the same
    bytes again, so segments, encodings and the joined video are bit-exact."""
    load("video", "inputs").clip(tmp_path / "clip.mp4", 2, 96, 64, 12)
    runs = []
    for k in range(2):  # each attempt in a process of its own, as a retried task runs
        d = tmp_path / f"run{k}"
        d.mkdir()
        step = (f"import sys, json; sys.path.insert(0, {str(EXAMPLES / 'video')!r}); import media; "
                f"from pathlib import Path; d = Path({str(d)!r}); "
                f"_, seg = media.split(Path({str(tmp_path / 'clip.mp4')!r}), 2, d); fh = open(d / 'frames', 'w+b'); "
                "media.decode(seg[1], fh); fh.seek(0); media.encode(fh, d / 'enc.mp4'); fh.close(); "
                "media.concat([d / 'enc.mp4', d / 'enc.mp4'], d / 'joined.mp4'); print(json.dumps([str(p) for p in seg]))")
        proc = subprocess.run([sys.executable, "-c", step], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        segments = [Path(p) for p in json.loads(proc.stdout.strip().splitlines()[-1])]
        runs.append([p.read_bytes() for p in (*segments, d / "frames", d / "enc.mp4", d / "joined.mp4")])
    assert runs[0] == runs[1]
