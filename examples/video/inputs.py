"""Default inputs of the video example, drawn here and encoded with PyAV: ``video``, a
clip of ``seconds`` x ``fps`` frames of ``width`` x ``height`` (a scrolling gradient, colour
bars and a bouncing ball, the same for the same parameters), H.264 in MP4 with a
keyframe every third of a second, and ``logo``, a small PNG for the watermark.

As a script it writes them to files: ``python examples/video/inputs.py --out DIR
[--seconds 4 --width 320 --height 240 --fps 24]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

try:
    import av
    import numpy as np
except ImportError as exc:  # say what to install, wherever this is imported (driver or task)
    raise ImportError(f"the video example needs PyAV and numpy ({exc}): pip install -e '.[examples]'") from exc

DEFAULTS = {"seconds": 4, "width": 320, "height": 240, "fps": 24}
SEED = 2024


def frames(seconds: int, width: int, height: int, fps: int, seed: int = SEED) -> Any:
    """The clip's frames, (height, width, 3) uint8 RGB, one at a time."""
    rng = np.random.default_rng(seed)
    bars = rng.integers(40, 255, size=(8, 3)).astype(np.uint8)
    ball = rng.integers(60, 255, size=3).astype(np.float32)
    pos = np.array([width * 0.3, height * 0.4])
    vel = rng.uniform(2.0, 5.0, size=2) * width / 320 * rng.choice([-1, 1], size=2)
    radius = max(4, min(width, height) // 10)
    ys, xs = np.mgrid[0:height, 0:width]
    bar_rows = height // 6
    for k in range(seconds * fps):
        base = ((xs + ys // 2 + 3 * k) % 256).astype(np.uint8)
        img = np.stack([base, (255 - base) // 2, np.full_like(base, (k * 5) % 256)], axis=-1)
        img[:bar_rows] = bars[(xs[:bar_rows] * len(bars)) // width]
        pos += vel
        for d, lim in ((0, width), (1, height)):
            if not radius <= pos[d] <= lim - radius:
                vel[d] = -vel[d]
                pos[d] = min(max(pos[d], radius), lim - radius)
        disk = (xs - pos[0]) ** 2 + (ys - pos[1]) ** 2 <= radius ** 2
        img[disk] = ball
        yield img


def clip(path: str | Path, seconds: int, width: int, height: int, fps: int, seed: int = SEED) -> int:
    """Write the clip to ``path`` (MP4, H.264); its number of frames."""
    if width % 2 or height % 2 or width < 16 or height < 16:
        raise ValueError(f"width and height must be even and at least 16, got {width}x{height}")
    n = 0
    with av.open(str(path), "w", format="mp4", options={"fflags": "+bitexact"}) as out:
        st = out.add_stream("libx264", rate=fps)
        st.width, st.height, st.pix_fmt = width, height, "yuv420p"
        st.codec_context.gop_size = max(1, fps // 3)
        st.options = {"crf": "18", "preset": "veryfast", "sc_threshold": "0"}  # keyframes on the grid only
        for n, img in enumerate(frames(seconds, width, height, fps, seed), 1):
            vf = av.VideoFrame.from_ndarray(img, format="rgb24")
            vf.pts = n - 1
            out.mux(st.encode(vf))
        out.mux(st.encode(None))
    return n


def logo(size: int = 64) -> bytes:
    """A ring with a cross, white on transparent, as PNG."""
    ys, xs = np.mgrid[0:size, 0:size] - (size - 1) / 2
    r = np.hypot(xs, ys)
    mark = ((r > size * 0.3) & (r < size * 0.45)) | (np.abs(xs) < size * 0.06) | (np.abs(ys) < size * 0.06)
    mark &= r < size * 0.45
    rgba = np.zeros((size, size, 4), np.uint8)
    rgba[mark] = (255, 255, 255, 255)
    cc = av.CodecContext.create("png", "w")
    cc.width, cc.height, cc.pix_fmt = size, size, "rgba"
    return b"".join(bytes(p) for p in cc.encode(av.VideoFrame.from_ndarray(rgba, format="rgba")) + cc.encode(None))


def default_inputs(params: dict[str, int]) -> dict[str, Any]:
    import tempfile

    p = {k: int(params.get(k, v)) for k, v in DEFAULTS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "clip.mp4"
        clip(path, **p)
        return {"video": path.read_bytes(), "logo": logo()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="directory to write clip.mp4 and logo.png to")
    for k, v in DEFAULTS.items():
        ap.add_argument(f"--{k}", type=int, default=v)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    n = clip(a.out / "clip.mp4", a.seconds, a.width, a.height, a.fps)
    (a.out / "logo.png").write_bytes(logo())
    print(f"{a.out / 'clip.mp4'}: {n} frames, {a.width}x{a.height} at {a.fps} fps; {a.out / 'logo.png'}")


if __name__ == "__main__":
    main()
