"""Keep cluster secrets out of plans, the audit table and printed diffs.

gpuinsight stores and prints only the fields a change touches; this is the second line of
defence for anything that still passes by (an observed container list, an EKS response, a
hand-written plan): every ``env[].value``, the data of a Secret, the last-applied-configuration
annotation (a copy of the whole object), credential-looking command-line flags and any map
entry whose key is named like a credential become :data:`MARK`.
"""

from __future__ import annotations

import re
from typing import Any

MARK = "<redacted>"
# key names that hold credentials: whole words of a (snake, kebab, dotted or camel) name
_CREDENTIAL_WORDS = ("password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "api-key",
                     "accesskey", "access_key", "access-key", "privatekey", "private_key", "private-key",
                     "credential", "credentials", "bearer", "authorization", "sessionkey", "session_key")
CREDENTIAL_KEY = re.compile(
    r"(^|[^a-z0-9])(" + "|".join(re.escape(w) for w in _CREDENTIAL_WORDS) + r")([^a-z0-9]|$)", re.IGNORECASE)
# --password=x, --token x, password: x inside a command line
_FLAG = re.compile(r"(?i)(--?[a-z0-9_.-]*(?:password|passwd|token|secret|api[-_]?key|access[-_]?key|credential)"
                   r"[a-z0-9_.-]*)(=|\s+)(\S+)")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _camel_split(key: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)


def credential_named(key: str) -> bool:
    return bool(CREDENTIAL_KEY.search(key) or CREDENTIAL_KEY.search(_camel_split(key)))


def redact(value: Any, *, key: str | None = None, kind: str | None = None) -> Any:
    """A copy of ``value`` with secrets replaced by :data:`MARK` (idempotent)."""
    if isinstance(value, dict):
        kind = value.get("kind") if isinstance(value.get("kind"), str) else kind
        out: dict[str, Any] = {}
        for k, v in value.items():
            name = str(k)
            if kind == "Secret" and name in ("data", "stringData") and isinstance(v, dict):
                out[k] = {dk: MARK for dk in v}
            elif name == "env" and isinstance(v, list):
                out[k] = [_env(item) for item in v]
            elif name == LAST_APPLIED:
                out[k] = MARK
            elif name in ("command", "args") and isinstance(v, list):
                out[k] = [_FLAG.sub(lambda m: f"{m[1]}{m[2]}{MARK}", s) if isinstance(s, str) else s for s in v]
            elif credential_named(name) and not isinstance(v, dict | list) and v not in (None, "", MARK):
                out[k] = MARK
            else:
                out[k] = redact(v, key=name, kind=kind)
        return out
    if isinstance(value, list):
        return [redact(v, key=key, kind=kind) for v in value]
    return value


def _env(item: Any) -> Any:
    if isinstance(item, dict) and "value" in item and item["value"] not in (None, ""):
        return {**redact({k: v for k, v in item.items() if k != "value"}), "value": MARK}
    return redact(item)


def redact_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """``{JSON pointer: value}`` with secrets redacted, judging a scalar by its pointer's last key."""
    out = {}
    for ptr, value in fields.items():
        last = ptr.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        if not isinstance(value, dict | list) and value not in (None, "") and (
                credential_named(last) or last == LAST_APPLIED or "/env/" in ptr and ptr.endswith("/value")):
            out[ptr] = MARK
        else:
            out[ptr] = redact(value, key=last)
    return out


def contains_mark(value: Any) -> bool:
    if isinstance(value, dict):
        return any(contains_mark(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_mark(v) for v in value)
    return isinstance(value, str) and MARK in value


def one_line(text: Any, limit: int = 1000) -> str:
    """Free text from a plan made safe for a terminal, a shell comment or a YAML comment: control
    and format characters (newlines, NEL, line/paragraph separators, escapes, bidi overrides)
    become spaces, so the text can never start a new command, document or line."""
    import unicodedata

    out = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in str(text))
    out = " ".join(out.split())
    return out if len(out) <= limit else out[: limit - 3] + "..."
