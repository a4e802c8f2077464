"""Read one kubectl dump (``-o json`` / ``-o yaml``) into a list of objects.

Accepts a ``List`` (``{"kind": "List", "items": [...]}`` or a typed ``NodeList``, whose items
may omit their kind), a bare JSON array, a single object, and multi-document YAML (``---``).
Syntax errors, bytes that are not UTF-8 and items that are not objects become
:class:`BadInput` naming the file, line and column (or item).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

from gpuinsight.errors import BadInput
from gpuinsight.textfile import decode_utf8

EXTENSIONS = (".json", ".yaml", ".yml")

try:  # the C loader is ~10x faster on large dumps
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover
    _Loader = yaml.SafeLoader


def find_dump(folder: Path, stem: str) -> tuple[Path | None, list[Path]]:
    """The dump file for ``stem`` and any same-stem files that were ignored."""
    found = [folder / f"{stem}{ext}" for ext in EXTENSIONS if (folder / f"{stem}{ext}").is_file()]
    return (found[0] if found else None), found[1:]


def _parse_json(path: Path, data: bytes) -> list[Any]:
    try:
        return [orjson.loads(data)]
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"{path}: line {exc.lineno} col {exc.colno}: {exc.msg}") from None


def _parse_yaml(path: Path, data: bytes) -> list[Any]:
    try:
        return [doc for doc in yaml.load_all(data, Loader=_Loader) if doc is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} col {mark.column + 1}: " if mark else ""
        what = exc.problem or exc.context or "invalid YAML"
        raise BadInput(f"{path}: {where}{what}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a NUL, a control byte)
        line = data.count(b"\n", 0, exc.position) + 1
        raise BadInput(f"{path}: line {line}: invalid YAML: character 0x{exc.character:02x} is not allowed") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None


def read_objects(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    text = decode_utf8(data, str(path))
    if not text.strip():
        raise BadInput(f"{path}: line 1 col 1: empty file (expected a kubectl List)")
    docs = _parse_json(path, data) if path.suffix == ".json" else _parse_yaml(path, text.encode())
    items: list[Any] = []
    for doc in docs:
        if isinstance(doc, list):
            items.extend(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
            implied = doc.get("kind")
            # a typed list (PodList, QueueList...) says its items' kind; a plain List does not
            if isinstance(implied, str) and implied.endswith("List") and implied != "List":
                for item in doc["items"]:
                    if isinstance(item, dict):
                        item.setdefault("kind", implied.removesuffix("List"))
            items.extend(doc["items"])
        elif isinstance(doc, dict) and "items" in doc and doc.get("items") is None:
            continue  # `kubectl get` of nothing in some versions: items: null
        elif isinstance(doc, dict):
            if "items" in doc:
                raise BadInput(f"{path}: items: expected a list, got {type(doc['items']).__name__}")
            items.append(doc)
        else:
            raise BadInput(f"{path}: expected a kubectl List or object, got {type(doc).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadInput(f"{path}: item {i}: expected an object, got {type(item).__name__}")
    return items


def item_label(item: dict[str, Any]) -> str:
    """``namespace/name`` (or ``name``) of an item for messages; never fails."""
    meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    name = meta.get("name") if isinstance(meta.get("name"), str) else "?"
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    return f"{ns}/{name}" if ns else name
