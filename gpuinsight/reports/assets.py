"""The Vega, Vega-Lite and Vega-Embed JavaScript, inlined so a report opens with no network.

vl-convert ships the libraries; :func:`vega_bundle` asks it for one self-contained bundle
(no imports, no CDN) that defines ``vegaEmbed``, ``vegaLite`` and ``vega`` on ``window``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
from pathlib import Path

import altair as alt
import vl_convert as vlc


def vegalite_version() -> str | None:
    """The Vega-Lite version (major.minor) matching Altair's schema, if vl-convert has it."""
    m = re.match(r"v?(\d+)\.(\d+)", alt.SCHEMA_VERSION)
    if not m:
        return None
    wanted = f"{m.group(1)}.{m.group(2)}"
    return wanted if wanted in vlc.get_vegalite_versions() else None


@functools.lru_cache(maxsize=2)
def vega_bundle() -> str:
    """The bundled JavaScript, safe to put inside a ``<script>`` element.

    Building it takes a few seconds of CPU (vl-convert bundles the libraries each time), so it
    is kept for the life of the process and in the user's cache folder, named by the vl-convert
    and Vega-Lite versions it was built from (a new vl-convert builds a new file).
    """
    vl_version = vegalite_version()
    cached = _bundle_cache(vl_version)
    if cached is not None:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = cached.read_text(encoding="utf-8")
            if text.endswith(_BUNDLE_END):
                return text[: -len(_BUNDLE_END)]
    js = vlc.javascript_bundle(vl_version=vl_version)
    # A literal "</script" inside the code would end the element early.
    js = re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)
    if cached is not None:  # written whole or not at all; a failure only costs the next report the build
        with contextlib.suppress(OSError):
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=cached.name, dir=cached.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(js + _BUNDLE_END)
            os.replace(tmp, cached)
    return js


_BUNDLE_END = "\n// end of bundle\n"  # a file cut short (full disk) lacks it and is rebuilt


def _bundle_cache(vl_version: str | None) -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache" if Path.home().is_dir() else None)
    if base is None:
        return None
    version = getattr(vlc, "__version__", None)
    if not version:
        return None
    return Path(base) / "gpuinsight" / f"vega-bundle-{version}-vl{vl_version or 'default'}.js"


def versions() -> dict[str, str]:
    return {
        "vega": vlc.get_vega_version(),
        "vega-lite": vegalite_version() or "default",
        "vega-embed": vlc.get_vega_embed_version(),
    }
