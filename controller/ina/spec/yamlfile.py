"""YAML loading that refuses duplicate keys (PyYAML silently keeps the last one,
which would hide, say, a switch listed twice), and turns every way a file can fail
to load into one error with a short reason.

Bounded, too: a file of at most MAX_BYTES, and a document of at most MAX_NODES nodes
once its aliases are expanded (an alias is a reference, so a 428-byte file of nested
aliases stands for billions of values, and anything that walks them, a message that
shows one, runs out of memory); a recursive alias is refused. ``show`` puts a value in
a message, cut short whatever it holds."""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml

from ina.errors import YamlFileError

#: The largest job or topology file read.
MAX_BYTES = 4 << 20
#: The most nodes a document may stand for, its aliases expanded.
MAX_NODES = 1_000_000
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 3, 6, 6
_REPR.maxstring = _REPR.maxother = 40


def show(value: Any, limit: int = 60) -> str:
    """A value for a message: its repr, cut short (nested values elided first)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[:limit - 5] + " ...)"


class _StrictLoader(yaml.SafeLoader):
    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node)
        return node


def _expanded_size(root: yaml.Node) -> int:
    """The nodes ``root`` stands for, aliases expanded; ComposerError past MAX_NODES
    or for a node that holds itself (a recursive alias)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise yaml.composer.ComposerError(None, None, "a recursive alias",
                                              node.start_mark)
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {MAX_NODES:,} values once its aliases are expanded",
                node.start_mark)
        sizes[key] = total
        return total

    return size(root)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: construct_mapping says so below
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file; raises YamlFileError (duplicate keys included)."""
    try:
        with Path(path).open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise YamlFileError(f"larger than {MAX_BYTES >> 20} MiB: not a job or topology "
                                "file")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError(f"not a text file (not UTF-8: {exc.reason} at byte {exc.start})") \
            from exc
    except OSError as exc:
        raise YamlFileError(exc.strerror or str(exc)) from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise YamlFileError(f"not valid YAML: {_first_lines(str(exc))}") from exc
    except RecursionError as exc:
        raise YamlFileError("not valid YAML: nested too deeply") from exc


def _first_lines(text: str, limit: int = 400) -> str:
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit - 4] + " ..."
