"""The Vega, Vega-Lite and Vega-Embed JavaScript, inlined so a report opens with no network.

vl-convert ships the libraries; :func:`vega_bundle` asks it for one self-contained bundle
(no imports, no CDN) that defines ``vegaEmbed``, ``vegaLite`` and ``vega`` on ``window``.
"""

from __future__ import annotations

import functools
import re

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

    Building it takes a few seconds, so it is cached for the life of the process.
    """
    js = vlc.javascript_bundle(vl_version=vegalite_version())
    # A literal "</script" inside the code would end the element early.
    return re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)


def versions() -> dict[str, str]:
    return {
        "vega": vlc.get_vega_version(),
        "vega-lite": vegalite_version() or "default",
        "vega-embed": vlc.get_vega_embed_version(),
    }
