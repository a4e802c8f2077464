"""Read one kubectl dump (``-o json`` / ``-o yaml``) into a list of objects.

Accepts a ``List`` (``{"kind": "List", "items": [...]}`` or a typed ``NodeList``, whose items
may omit their kind), a bare JSON array, a single object, and multi-document YAML (``---``).
Syntax errors, bytes that are not UTF-8 and items that are not objects become
:class:`BadInput` naming the file, line and column (or item). YAML is bounded: a document whose
aliases expand it far past its file, that refers to itself, or too large to parse is refused.
"""

from __future__ import annotations

import itertools
import re
from datetime import date
from pathlib import Path
from typing import Any

import orjson
import yaml

from gpuinsight.errors import BadInput
from gpuinsight.textfile import decode_utf8

EXTENSIONS = (".json", ".yaml", ".yml")
# YAML anchors and aliases let a few KB stand for billions of nodes ("billion laughs"): the
# loaded document shares them, but everything that reads it (the mappers, the JSON columns)
# expands them. A document may expand to at most ALIAS_EXPANSION times its file, or
# MIN_ALIAS_BUDGET for small files: hand-written YAML with a few anchors fits, a bomb does not.
ALIAS_EXPANSION = 2
MIN_ALIAS_BUDGET = 1 << 20
# The YAML parser holds ~16x a document's text in memory while it builds it: a 256 MiB document
# needs ~4 GB. kubectl's JSON of the same objects loads in a fraction of that.
MAX_YAML_DOCUMENT_BYTES = 256 << 20
_DOCUMENT_START = re.compile(rb"^---", re.MULTILINE)

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


def _document_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each YAML document: the text between ``---`` lines. A ``---`` inside a
    scalar at column 0 splits one in two here, which only makes the pieces smaller."""
    cuts = [m.start() for m in _DOCUMENT_START.finditer(data)]
    bounds = sorted({0, *cuts, len(data)})
    return list(itertools.pairwise(bounds))


def _check_document_sizes(path: Path, data: bytes) -> None:
    for start, end in _document_spans(data):
        if end - start > MAX_YAML_DOCUMENT_BYTES:
            line = data.count(b"\n", 0, start) + 1
            raise BadInput(f"{path}: line {line}: a YAML document of {(end - start) / 2**20:,.0f} MiB is more than "
                           f"gpuinsight parses as YAML ({MAX_YAML_DOCUMENT_BYTES >> 20} MiB: the parser needs ~16x "
                           "that in memory); write the dump as JSON (`kubectl get ... -o json`) or split it")


def _scalar_size(value: Any) -> int:
    """About what a scalar takes written as JSON."""
    if isinstance(value, str | bytes):
        return len(value) + 2
    return 24 if isinstance(value, date) else 6


def expanded_size(root: Any, limit: int) -> int:
    """About the size of ``root`` written out with every YAML alias expanded, computed without
    expanding: a node shared by aliases is measured once and counted each time it is used.
    Raises ValueError past ``limit`` or when a node contains itself."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if children_done:
            on_path.discard(key)
            total = 2 + sum(sizes[id(c)] if isinstance(c, dict | list) else _scalar_size(c) for c in children)
            if isinstance(node, dict):
                total += sum(_scalar_size(k) + 2 for k in node)
            if total > limit:
                raise ValueError(f"expands to more than {limit:,} bytes")
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ValueError("an alias refers to a node that contains it (a cycle)")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, dict | list) and id(c) not in sizes)
    return sizes.get(id(root), _scalar_size(root))


def _check_aliases(path: Path, data: bytes, docs: list[Any]) -> None:
    """Refuse documents whose aliases expand past their budget (see ALIAS_EXPANSION)."""
    if b"*" not in data or b"&" not in data:  # no anchor or no alias: nothing is shared
        return
    budget = max(ALIAS_EXPANSION * len(data), MIN_ALIAS_BUDGET)
    for i, doc in enumerate(docs):
        try:
            expanded_size(doc, budget)
        except ValueError as exc:
            raise BadInput(f"{path}: document {i + 1}: YAML aliases: {exc} (the budget is {ALIAS_EXPANSION}x the "
                           f"file or {MIN_ALIAS_BUDGET >> 20} MiB; kubectl never writes aliases)") from None


def _parse_yaml(path: Path, data: bytes) -> list[Any]:
    _check_document_sizes(path, data)
    try:
        docs = [doc for doc in yaml.load_all(data, Loader=_Loader) if doc is not None]
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
    _check_aliases(path, data, docs)
    return docs


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
