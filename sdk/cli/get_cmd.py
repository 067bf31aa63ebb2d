"""``funcsion get RUN NAME [-o FILE] [--raw] [--unpickle]``: a workflow output
(or a ``persist=True`` copy) of a finished run, read from COS where its saved
report says it is, and decoded with the codec its writer chose: text as is,
JSON and msgpack values as indented JSON, bytes as they are. No stack needs
to be running: the local COS is a directory, S3 is read with boto3.

``--raw`` gives the stored payload unchanged. A ``pickle`` value is decoded
only with ``--unpickle`` (unpickling runs code: trust the run's handlers).
Binary bytes are not written to a terminal (as curl refuses): ``-o FILE`` or a
redirection takes them.
"""

from __future__ import annotations

import argparse
import codecs
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from funcsion_errors import FuncsionError

__all__ = ["add_parser", "run", "render_value", "looks_binary", "BinaryOutput", "OutputNotFound"]


class OutputNotFound(FuncsionError):
    """The run kept no such output, or its copy cannot be read."""

    retryable = False


class BinaryOutput(FuncsionError):
    """A binary value would go to a terminal."""

    retryable = False


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "get", help="fetch and decode an output of a finished run",
        description="Print (or write to a file) a workflow output of a run, decoded with its writer's codec.")
    p.add_argument("run_id", metavar="RUN", help="a run id (r-3), 'last', or the path of a report file")
    p.add_argument("name", metavar="NAME", help="the output's name (see `funcsion report RUN`)")
    p.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of standard output")
    p.add_argument("--raw", action="store_true", help="the stored bytes as they are, not decoded")
    p.add_argument("--unpickle", action="store_true", help="decode a pickle value (runs code: trust the run)")
    p.add_argument("--state-dir", default=None, help="the state directory the run used (.funcsion)")
    p.set_defaults(run=run, _parser=p)


def _read(location: str, cfg: Any, target: dict[str, Any] | None = None) -> bytes:
    """The bytes at a report's location: a local file, or ``s3://bucket/key`` (of a run on
    AWS: through its stack's COS, the endpoint and region its report's ``target`` names)."""
    if location.startswith("s3://"):
        from storage_functions.cos import S3COS
        from storage_functions.exceptions import StorageError

        parts = urlsplit(location)
        cos = parse_qs(urlsplit(str((target or {}).get("cos_url") or "")).query)
        endpoint = (cos.get("endpoint_url") or [cfg.s3_endpoint_url])[-1] or None
        region = (cos.get("region") or [(target or {}).get("region") or cfg.region])[-1]
        try:
            return S3COS(parts.netloc, endpoint_url=endpoint, region_name=region).get(parts.path.lstrip("/"))
        except StorageError as exc:
            raise OutputNotFound(f"cannot read {location}: {exc}") from None
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise OutputNotFound(f"cannot read {location}: {exc.strerror or exc} (the run's COS copy is gone, or "
                             "the run used another state directory: give --state-dir)") from None


def render_value(data: bytes, codec: str, *, unpickle: bool = False) -> bytes:
    """The bytes ``funcsion get`` prints for a stored payload written with ``codec``."""
    from sdk._codecs import decode

    if codec in ("bytes", "str"):
        return data
    if codec == "pickle" and not unpickle:
        raise OutputNotFound("it was written with codec 'pickle': unpickling runs code, so add --unpickle if you "
                             "trust the run's handlers (or --raw for the pickled bytes)")
    value = decode(data, codec)
    if codec == "pickle" and not _jsonable(value):
        return repr(value).encode() + b"\n"
    return (json.dumps(value, indent=2, ensure_ascii=False, default=_bytes_as_text) + "\n").encode()


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _bytes_as_text(o: Any) -> Any:
    if isinstance(o, (bytes, bytearray)):
        return o.decode("utf-8", "backslashreplace")
    raise TypeError(f"{type(o).__name__} is not JSON")


def run(args: argparse.Namespace) -> int:
    from sdk._config import Config
    from sdk.local._report_store import load_report

    cfg = Config.load(state_dir=args.state_dir)
    doc = load_report(cfg.state_dir, args.run_id)
    kept = {**doc.get("persisted", {}), **doc.get("outputs", {})}
    if args.name not in kept:
        names = ", ".join(kept) or "none (a run keeps its outputs only when it succeeds)"
        raise OutputNotFound(f"run {doc['run_id']} kept no output {args.name!r}; it kept: {names}")
    data = _read(kept[args.name], cfg, doc.get("target"))
    if args.name in doc.get("outputs", {}):  # a saved output holds the payload only
        codec, payload = (doc.get("output_codecs") or {}).get(args.name, "bytes"), data
    else:  # a persist=True copy starts with its codec byte
        from sdk._client import _CODEC_NAMES

        codec, payload = _CODEC_NAMES.get(data[0], "bytes") if data else "bytes", data[1:]
    try:
        out = payload if args.raw else render_value(payload, codec, unpickle=args.unpickle)
    except OutputNotFound as exc:
        raise OutputNotFound(f"output {args.name!r} of run {doc['run_id']}: {exc}") from None
    if not args.output and sys.stdout.isatty() and looks_binary(out):
        raise BinaryOutput(f"output {args.name!r} of run {doc['run_id']} is binary ({len(out):,} bytes"
                             f"{_kind(out)}): binary output can mess up your terminal; write it to a file with "
                             f"-o FILE (or --raw > FILE)")
    return _emit(args, out)


def looks_binary(data: bytes) -> bool:
    """Whether ``data`` would garble a terminal: a NUL byte, or not UTF-8, in its first 8 KiB."""
    head = data[:8192]
    if b"\0" in head:
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(data) <= len(head))
    except UnicodeDecodeError:
        return True
    return False


def _kind(data: bytes) -> str:
    for magic, what in ((b"\x7fELF", "an ELF file"), (b"\x89PNG", "a PNG image"), (b"PK\x03\x04", "a zip file"),
                        (b"\x1f\x8b", "gzip data"), (b"%PDF", "a PDF")):
        if data.startswith(magic):
            return f", {what}"
    return ""


def _emit(args: argparse.Namespace, out: bytes) -> int:
    if args.output:
        Path(args.output).write_bytes(out)
        print(f"wrote {len(out)} bytes to {args.output}", file=sys.stderr)
    else:
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
    return 0
