"""JSON document helpers shared by the builders, the diff, apply and rollback.

* JSON pointers (RFC 6901) address the fields an action touches (``/spec/weight``,
  ``/metadata/labels/nvidia.com~1mig.config``).
* ``apply_merge`` is the server-side-apply merge as far as gpuinsight relies on it: maps merge
  key by key, lists of named items (containers) merge by ``name``, other lists are atomic.
* ``merge_patch`` is RFC 7386 (used for rollback), ``json_patch`` is RFC 6902 (used for edits
  that remove a field, guarded by ``test`` operations).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

# Top-level keys of an apply configuration that identify the object rather than change it.
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


class PatchError(ValueError):
    """A patch does not fit the document (a failed ``test``, a missing parent)."""


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(t)) for t in tokens)


def tokens(ptr: str) -> list[str]:
    if ptr == "":
        return []
    if not ptr.startswith("/"):
        raise PatchError(f"bad JSON pointer {ptr!r}")
    return [unescape(t) for t in ptr[1:].split("/")]


_MISSING = object()


def get(doc: Any, ptr: str, default: Any = None) -> Any:
    cur = doc
    for tok in tokens(ptr):
        if isinstance(cur, dict):
            cur = cur.get(tok, _MISSING)
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return default
        if cur is _MISSING:
            return default
    return cur


def has(doc: Any, ptr: str) -> bool:
    return get(doc, ptr, _MISSING) is not _MISSING


def truncate_at_list(ptr: str) -> str:
    """``/spec/tasks/0/template`` -> ``/spec/tasks``: lists are restored as a whole."""
    out: list[str] = []
    for tok in tokens(ptr):
        if tok.isdigit() or tok == "-":
            break
        out.append(tok)
    return pointer(*out)


def leaf_pointers(cfg: dict[str, Any]) -> list[str]:
    """The fields an apply configuration sets: leaves of its maps; lists count as one leaf."""
    found: list[str] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, (*path, key))
        elif path not in _IDENTITY:
            found.append(pointer(*path))

    walk(cfg, ())
    return found


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(i, dict) and "name" in i for i in value)


def apply_merge(base: Any, cfg: Any) -> Any:
    """``base`` with the apply configuration ``cfg`` merged in (a new document)."""
    if isinstance(base, dict) and isinstance(cfg, dict):
        out = copy.deepcopy(base)
        for key, value in cfg.items():
            out[key] = apply_merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    if _named_list(base) and _named_list(cfg):
        out_list = [copy.deepcopy(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(out_list)}
        for item in cfg:
            if item["name"] in index:
                out_list[index[item["name"]]] = apply_merge(out_list[index[item["name"]]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(cfg)


def merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _parent(doc: Any, toks: list[str]) -> tuple[Any, str]:
    if not toks:
        raise PatchError("cannot patch the document root")
    cur = doc
    for tok in toks[:-1]:
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            raise PatchError(f"path {pointer(*toks)}: parent does not exist")
    return cur, toks[-1]


def json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 (add, remove, replace, test); all-or-nothing."""
    out = copy.deepcopy(doc)
    for op in ops:
        kind, path = op.get("op"), op.get("path", "")
        toks = tokens(path)
        if kind == "test":
            if norm(get(out, path, _MISSING)) != norm(op.get("value")):
                raise PatchError(f"test failed at {path}: expected {op.get('value')!r}")
            continue
        parent, last = _parent(out, toks)
        if kind in ("add", "replace"):
            value = copy.deepcopy(op.get("value"))
            if isinstance(parent, list):
                if last == "-":
                    parent.append(value)
                elif not last.isdigit() or int(last) > len(parent):
                    raise PatchError(f"path {path}: bad list index")
                elif kind == "add":
                    parent.insert(int(last), value)
                else:
                    parent[int(last)] = value
            elif isinstance(parent, dict):
                if kind == "replace" and last not in parent:
                    raise PatchError(f"path {path}: nothing to replace")
                parent[last] = value
            else:
                raise PatchError(f"path {path}: parent is not a container")
        elif kind == "remove":
            if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
                parent.pop(int(last))
            elif isinstance(parent, dict) and last in parent:
                del parent[last]
            else:
                raise PatchError(f"path {path}: nothing to remove")
        else:
            raise PatchError(f"unsupported JSON patch op {kind!r}")
    return out


def norm(value: Any) -> Any:
    """Compare values the way the API server stores them: ``4`` and ``"4"`` are one quantity."""
    if value is _MISSING:
        return None
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def snapshot_fields(obj: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """What an object holds at ``paths`` and nothing else: ``{"fields": {ptr: value}, "absent":
    [ptr]}``. A path the object lacks is recorded at its highest absent level, so restoring a
    label-less node selector removes the whole ``nodeSelector`` rather than leaving ``{}``."""
    fields: dict[str, Any] = {}
    absent: set[str] = set()
    for ptr in paths:
        if has(obj, ptr):
            fields[ptr] = copy.deepcopy(get(obj, ptr))
            continue
        toks = tokens(ptr)
        for i in range(1, len(toks) + 1):
            if not has(obj, pointer(*toks[:i])):
                absent.add(pointer(*toks[:i]))
                break
    kept = [p for p in sorted(absent) if not any(p.startswith(q + "/") for q in absent)]
    return {"fields": fields, "absent": kept}


def restore_ops(snapshot: dict[str, Any], live: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations that put ``snapshot``'s fields back into ``live``."""
    ops: list[dict[str, Any]] = []
    for ptr in snapshot.get("absent") or []:
        if has(live, ptr):
            ops.append({"op": "remove", "path": ptr})
    for ptr, value in sorted((snapshot.get("fields") or {}).items()):
        toks = tokens(ptr)
        # "add" replaces an object's member but inserts into a list: a list element is replaced
        in_list = bool(toks) and isinstance(get(live, pointer(*toks[:-1])) if has(live, pointer(*toks[:-1])) else None,
                                            list)
        op = "replace" if in_list and has(live, ptr) else "add"
        ops.append({"op": op, "path": ptr, "value": copy.deepcopy(value)})
    return ops


def strip_server_fields(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """The object without managedFields and status (what an audit row keeps)."""
    if obj is None:
        return None
    out = copy.deepcopy(obj)
    out.pop("status", None)
    out.get("metadata", {}).pop("managedFields", None)
    return out


def walk_items(doc: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every (pointer, leaf value) of a document (lists are leaves)."""
    if isinstance(doc, dict) and doc:
        for key, value in doc.items():
            yield from walk_items(value, prefix + "/" + escape(str(key)))
    else:
        yield prefix, doc
