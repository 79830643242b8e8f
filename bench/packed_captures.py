"""Raw profiler captures kept packed: a capture folder holds its small records (``*.meta.json``,
``pairs.json``, logs) as they are and the raw files (Nsight Compute reports and CSV pages, torch
traces, a finished advice trajectory's step records) in one ``raw.tar.xz`` beside them, about 30 times smaller.

    python bench/packed_captures.py pack DIR     # move DIR's raw files into DIR/raw.tar.xz
    python bench/packed_captures.py unpack DIR   # the other way round

Scripts that read a capture open it with ``unpacked(DIR)``: a folder that holds every file, raw or not.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

ARCHIVE = "raw.tar.xz"
RAW = ("*.ncu-rep", "*.csv", "*.torch-trace.json", "step*.json", "reread-step*.json")  # the last two: a finished
# trajectory's records (bench/advice_trajectories.py), read by its report and the calibration


def raw_files(folder: Path) -> list[Path]:
    return sorted({f for pattern in RAW for f in folder.glob(pattern) if f.is_file()})


def pack(folder: Path) -> Path:
    """Move the raw files into the archive (members sorted, owner and times zeroed: the same files give
    the same bytes)."""
    files = raw_files(folder)
    if not files:
        raise SystemExit(f"{folder}: no raw files ({', '.join(RAW)}) to pack")
    archive = folder / ARCHIVE
    if archive.exists():
        raise SystemExit(f"{archive} exists: unpack it first, so that no capture is lost")

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for f in files:
            tar.add(f, arcname=f.name, filter=plain)
    for f in files:
        f.unlink()
    return archive


def unpack(folder: Path) -> list[Path]:
    archive = folder / ARCHIVE
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(folder, filter="data")
    archive.unlink()
    return [folder / n for n in names]


@contextlib.contextmanager
def unpacked(folder: Path) -> Iterator[Path]:
    """``folder`` itself when nothing is packed; else a temporary copy with the archive extracted."""
    folder = Path(folder)
    if not (folder / ARCHIVE).is_file():
        yield folder
        return
    with tempfile.TemporaryDirectory(prefix=f"{folder.name}-") as tmp:
        copy = Path(tmp)
        for f in folder.iterdir():
            if f.is_file() and f.name != ARCHIVE:
                shutil.copy2(f, copy / f.name)
        with tarfile.open(folder / ARCHIVE) as tar:
            tar.extractall(copy, filter="data")
        yield copy


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["pack", "unpack"])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    if args.action == "pack":
        archive = pack(args.folder)
        print(f"{archive}: {archive.stat().st_size} bytes")
    else:
        for f in unpack(args.folder):
            print(f)


if __name__ == "__main__":
    main()
