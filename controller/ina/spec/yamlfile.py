"""YAML loading that refuses duplicate keys (PyYAML silently keeps the last one,
which would hide, say, a switch listed twice), and turns every way a file can fail
to load into one error with a short reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ina.errors import YamlFileError


class _StrictLoader(yaml.SafeLoader):
    pass


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
        text = Path(path).read_text(encoding="utf-8")
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
