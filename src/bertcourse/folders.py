"""Folders: which files in a course folder are content (the one rule for every place the course scans
folders), where the course caches what it prepares, and how it writes a file that no reader ever sees
half-written (`write_atomic`).

Editors and operating systems leave files next to a notebook: JupyterLab's `.ipynb_checkpoints/`
(a stale copy of every notebook opened), Python's `__pycache__/`, macOS's `.DS_Store` and `._*`
files, backups ending in `~`, LibreOffice's `.~lock.*#`. None of them is course content, so the
release comparison, `bertcourse validate`, autograde's submission discovery, data folders and lesson
listings all skip them by asking `is_artefact`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

_ARTEFACT_NAMES = frozenset({"__pycache__", "Thumbs.db", "desktop.ini"})
CACHE_ENV = "BERTCOURSE_CACHE"


def cache_dir() -> Path:
    """Where prepared data, tokenizers and token ids are cached: $BERTCOURSE_CACHE or ~/.cache/bertcourse."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bertcourse").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def is_artefact(name: str) -> bool:
    """True for a file or folder name an editor or the system made: hidden names (`.ipynb_checkpoints`,
    `.DS_Store`, `.~lock.x#`, `.git`), `__pycache__`, and backups ending in `~`."""
    return name.startswith(".") or name.endswith("~") or name in _ARTEFACT_NAMES


def content_files(folder: Path, pattern: str = "*", recursive: bool = True) -> list[Path]:
    """The files under `folder` matching the glob `pattern` (on the name), sorted, artefacts skipped
    (an artefact folder is not entered at all)."""
    if not recursive:
        return sorted(p for p in folder.glob(pattern) if p.is_file() and not is_artefact(p.name))
    found = []
    for parent, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not is_artefact(d)]
        here = Path(parent)
        found.extend(here / name for name in files if not is_artefact(name) and Path(name).match(pattern))
    return sorted(found)


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Write via a temporary file and rename, so a reader (or a killed batch or run) never sees half a file.
    The file is private (0600, as the temporary file is made) unless `mode` says otherwise."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_results(folder: str | Path, format_tag: str, command: str, error: type[Exception]) -> dict[str, Any]:
    """results.json written by `bertcourse COMMAND` (`folder` or the file itself), checked to be one: its
    "format" is `format_tag`. Anything else raises `error` naming the file and the command that writes it."""
    path = Path(folder)
    if path.is_dir():
        path = path / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise error(f"{path}: no readable results ({type(exc).__name__}: {exc}); run `bertcourse {command}` "
                    "first") from exc
    if not isinstance(results, dict) or results.get("format") != format_tag:
        raise error(f"{path}: not the results of `bertcourse {command}` (format {format_tag!r})")
    return results


def package_commit(root: Path) -> str:
    """The checkout's git commit, with `+dirty` when tracked files differ from it; `unknown` outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        dirty = git("status", "--porcelain", "--untracked-files=no").strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def file_sha256(path: str | Path) -> str:
    """A file's sha256 (hex), read a megabyte at a time; computed once per file version (path, mtime, size)."""
    stat = Path(path).stat()
    return _file_sha256(Path(path).resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _file_sha256(path: Path, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_sha256(folder: str | Path, expected: dict[str, str], error: type[Exception], restore: str) -> None:
    """Refuse with `error`, in one line naming the file, a file of `folder` that is missing or whose sha256 is not
    the recorded one (`expected`: name -> hex); `restore` says how to get the right file back. The one check of
    the course's shipped checkpoints and of a packaged public checkpoint's files."""
    for name, want in expected.items():
        path = Path(folder) / name
        if not path.is_file():
            raise error(f"{path}: missing; {restore}")
        got = file_sha256(path)
        if got != want:
            raise error(f"{path}: sha256 {got[:16]}... is not the recorded {want[:16]}...: the file was changed or "
                        f"damaged; {restore}")
