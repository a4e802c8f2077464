"""Faults injected into real ``gpuinsight`` processes for the write-path tests: a filesystem with
little room, a read-only one. Each uses a real kernel mechanism, the best this machine allows,
and says which (the tests print it); none skips for want of privileges.

* Little room: a tmpfs of the given size mounted in a private mount namespace (``unshare -m``,
  which needs root or CAP_SYS_ADMIN) that lives as long as the command; the files are copied out
  afterwards for inspection. Elsewhere: the command runs under RLIMIT_FSIZE, so no file it
  writes grows past the limit (write errors, per file rather than for the whole disk).
* Read-only: a read-only bind mount in a private mount namespace; elsewhere the folder and its
  files lose their write permission (which binds a user that is not root).
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GPUINSIGHT = str(Path(sys.executable).with_name("gpuinsight"))
PAGE = 4096


@functools.cache
def can_mount() -> bool:
    """Can this process mount a tmpfs in a private mount namespace?"""
    if not shutil.which("unshare"):
        return False
    with tempfile.TemporaryDirectory() as tmp:
        res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              'mount -t tmpfs -o size=1m tmpfs "$0" && touch "$0/x"', tmp],
                             capture_output=True, timeout=30)
        return res.returncode == 0 and not (Path(tmp) / "x").exists()


def layer() -> str:
    return "tmpfs in a mount namespace" if can_mount() else "RLIMIT_FSIZE"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    after: Path   # what the small disk held when the command ended (a copy)


def _pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


def run_with_little_room(cmd: Sequence[str], files: Sequence[Path], room: int, work: Path,
                         env: dict[str, str] | None = None, timeout: float = 300) -> Run:
    """Copy ``files`` into an empty folder with ``room`` bytes free after them, run ``cmd`` (its
    ``{dir}`` names the folder) and return its outcome with a copy of the folder afterwards."""
    disk, after = work / "disk", work / "after"
    disk.mkdir(parents=True)
    after.mkdir()
    args = [a.replace("{dir}", str(disk)) for a in cmd]
    full_env = {**os.environ, **(env or {})}
    if can_mount():
        size = sum(_pages(f.stat().st_size) for f in files) + _pages(room) + PAGE
        script = ('set -e; mount -t tmpfs -o "size=$SIZE" tmpfs "$DISK"; for f in "$@"; do [ "$f" = -- ] && break; '
                  'cp "$f" "$DISK"/; done; while [ "$1" != -- ]; do shift; done; shift; set +e; "$@"; rc=$?; '
                  'cp -a "$DISK"/. "$AFTER"/; exit $rc')
        res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                              *map(str, files), "--", *args], capture_output=True, text=True, timeout=timeout,
                             env={**full_env, "SIZE": str(size), "DISK": str(disk), "AFTER": str(after)})
        return Run(res.returncode, res.stdout, res.stderr, after)
    for f in files:
        shutil.copy(f, disk)
    limit = max((f.stat().st_size for f in files), default=0) + room

    def small_files() -> None:  # in the child: a write past the limit fails (EFBIG) instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    res = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env,
                         preexec_fn=small_files)
    shutil.copytree(disk, after, dirs_exist_ok=True)
    return Run(res.returncode, res.stdout, res.stderr, after)


def run_read_only(cmd: Sequence[str], folder: Path, env: dict[str, str] | None = None,
                  timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` with ``folder`` read-only."""
    full_env = {**os.environ, **(env or {})}
    if can_mount():
        script = 'mount --bind "$RO" "$RO" && mount -o remount,bind,ro "$RO" && exec "$@"'
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *cmd],
                              capture_output=True, text=True, timeout=timeout, env={**full_env, "RO": str(folder)})
    paths = [folder, *folder.iterdir()]
    modes = {p: p.stat().st_mode for p in paths}
    try:
        for p in paths:
            p.chmod(modes[p] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=full_env)
    finally:
        for p in paths:
            p.chmod(modes[p])
