"""What a new user meets first: the README's two commands, its screenshot of the report, and
`.ci/test` saying what it is doing while it installs system packages."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_opens_with_the_two_commands_and_shows_the_report() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert first_block, "no command block"
    lines = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert len(lines) == 2 and "gpuinsight demo" in lines[0] and lines[1] == "bash .ci/test"
    assert readme.index(first_block.group(0)) < readme.index("## ")  # before any section
    assert "pip install '.[notebook]'" in readme and "jupyter lab notebooks/" in readme
    shot = re.search(r"!\[[^\]]+\]\((docs/[\w.-]+\.png)\)", readme)
    assert shot, "no screenshot in the README"
    png = (ROOT / shot.group(1)).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 1200 and height >= 1000
    assert (ROOT / "docs" / "make_screenshot.py").exists() and "docs/make_screenshot.py" in readme
    assert "demo-out/" in (ROOT / ".gitignore").read_text().splitlines()


def test_ci_install_step_streams_progress(tmp_path: Path) -> None:
    """With Prometheus and Chromium missing, `.ci/system-packages` numbers apt-get's lines as
    they come: the first one is on screen while apt-get is still running."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id", "env", "sleep"):  # and nothing else: prometheus is missing
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    go = tmp_path / "go"
    log = tmp_path / "apt.log"
    fake = bin_dir / "apt-get"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {log}\n'
        'if [ "$1" = update ]; then echo "Hit:1 http://deb.example stable InRelease"; exit 0; fi\n'
        'echo "Reading package lists..."\n'
        'echo "Get:1 http://deb.example stable/main amd64 prometheus 2.53"\n'
        f'while [ ! -e {go} ]; do sleep 0.05; done\n'  # hold until the test saw the first line
        'echo "Unpacking prometheus ..."\n'
        'echo "Setting up prometheus (2.53) ..."\n'
        'echo "Setting up chromium (130) ..."\n'
    )
    fake.chmod(0o755)
    (bin_dir / "sudo").write_text('#!/usr/bin/env bash\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "LANG": "C"}
    proc = subprocess.Popen(["bash", str(ROOT / ".ci" / "system-packages")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, cwd=tmp_path)
    seen: list[str] = []
    watchdog = threading.Timer(20, proc.kill)  # held-back output would block readline forever
    watchdog.start()
    try:
        assert proc.stdout is not None
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.rstrip("\n"))
            if "Get:1" in line:
                go.touch()  # apt-get was still running when this line arrived
        rest, _ = proc.communicate(timeout=20)
        seen += rest.splitlines()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, seen
    assert go.exists(), f"progress was not streamed: {seen}"
    assert seen[0] == "==> installing prometheus chromium with apt-get (first run only; this takes a few minutes)"
    assert "    [1] Get:1 http://deb.example stable/main amd64 prometheus 2.53" in seen
    assert "    [3] Setting up chromium (130) ..." in seen
    assert "Reading package lists..." not in "\n".join(seen)
    assert seen[-1] == "==> installed prometheus chromium"
    calls = log.read_text().splitlines()
    assert calls[0].startswith("update") and calls[1].startswith("install -y") and calls[1].endswith(
        "prometheus chromium")
    # nothing missing: nothing to do, nothing printed
    for tool in ("prometheus", "promtool", "chromium"):
        (bin_dir / tool).write_text("#!/usr/bin/env bash\n")
        (bin_dir / tool).chmod(0o755)
    log.unlink()
    quiet = subprocess.run(["bash", str(ROOT / ".ci" / "system-packages")], env=env, capture_output=True,
                           text=True, check=False)
    assert quiet.returncode == 0 and quiet.stdout == "" and not log.exists()


def test_ci_install_step_fails_when_apt_get_fails(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    for name, body in (("apt-get", 'echo "E: Unable to locate package chromium" >&2; exit 100'),
                       ("sudo", 'exec "$@"')):
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(["bash", str(ROOT / ".ci" / "system-packages")], capture_output=True, text=True,
                          env={**{k: v for k, v in os.environ.items() if k == "LANG"}, "PATH": str(bin_dir)},
                          check=False)
    assert done.returncode != 0 and "Unable to locate package" in done.stderr
