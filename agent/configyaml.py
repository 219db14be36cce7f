"""The config file read through PyYAML: anything the plain reader in agent/config.py leaves to it.

That is every file outside the plain subset (anchors, multi-line or escaped strings, tags, flow
mappings, unusual characters) and every file that is not valid YAML, whose errors are worded here
with the file and the line. Loaded only then, so that a command reading a plain config never imports
PyYAML (its import compiles large regular expressions).
"""

from __future__ import annotations

from typing import Any

import yaml

from agent.config import _Loc
from agent.errors import ConfigError


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases: a config has no use for them, and nested
    aliases expand exponentially (a few lines can take minutes, or forever, to load)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in PyYAML's stubs
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None, None, "anchors (&name) and aliases (*name) are not allowed in the config; "
                "write each value out", event.start_mark)
        return super().compose_node(parent, index)


def _scalar(node: yaml.Node) -> Any:
    return yaml.constructor.SafeConstructor().construct_object(node, deep=True)


def _compose_fast(text: str) -> yaml.Node | None:
    """``text`` composed by libyaml when it is there and the text is plain: valid YAML without anchors or
    aliases (else None, and the pure-Python loader reads it again and words any error)."""
    loader_class = getattr(yaml, "CSafeLoader", None)
    if loader_class is None:
        return None
    try:
        for event in yaml.parse(text, Loader=loader_class):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                return None
        loader = loader_class(text)
        try:
            node: yaml.Node | None = loader.get_single_node()
        finally:
            loader.dispose()
        return node
    except (yaml.YAMLError, RecursionError, UnicodeError):  # libyaml refuses the characters PyYAML does
        return None


def _to_python(node: yaml.Node, path: tuple[str, ...], loc: _Loc) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k, v in node.value:
            key = str(_scalar(k) if not isinstance(k, yaml.ScalarNode) else k.value)
            loc.lines[path + (key,)] = k.start_mark.line + 1
            if key in out:
                raise ConfigError(f"{loc.file}:{k.start_mark.line + 1}: {'.'.join(path + (key,))}: "
                                  "the key appears twice; keep one")
            out[key] = _to_python(v, path + (key,), loc)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, path + (str(i),), loc) for i, v in enumerate(node.value)]
    try:
        return _scalar(node)
    except (ValueError, OverflowError) as e:  # e.g. a date like 2026-13-45
        where = ".".join(path) or "(top level)"
        raise ConfigError(f"{loc.file}:{node.start_mark.line + 1}: {where}: {node.value!r} cannot be read "
                          f"({e}); quote it if it is text") from None


def _compose(text: str, file: str) -> yaml.Node | None:
    fast = _compose_fast(text)
    if fast is not None:
        return fast
    loader: _NoAliasLoader | None = None
    try:
        loader = _NoAliasLoader(text)  # the reader checks the characters here already
        return loader.get_single_node()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        started = ""
        if e.context and e.context_mark and mark and e.context_mark.line != mark.line:
            started = f" ({e.context} started at line {e.context_mark.line + 1})"
        raise ConfigError(f"{file}{line}: not valid YAML: {e.problem or e.context}{started}; "
                          "fix the syntax there") from None
    except yaml.reader.ReaderError as e:
        lineno = text.count("\n", 0, e.position) + 1
        raise ConfigError(f"{file}:{lineno}: not valid YAML: {e.reason} (character {e.character!r}); "
                          "remove that character or save the file as plain UTF-8 text") from None
    except yaml.YAMLError as e:
        one_line = " ".join(str(e).split())
        raise ConfigError(f"{file}: not valid YAML: {one_line}") from None
    except RecursionError:
        raise ConfigError(f"{file}: not valid YAML: nested too deeply; a config is a few levels of "
                          "key: value, see config.example.yaml") from None
    finally:
        if loader is not None:
            loader.dispose()


def parse(text: str, file: str) -> tuple[dict[str, Any], _Loc]:
    """``text``'s mapping of settings and the line of each key; a ConfigError naming the file and line
    when it is not valid YAML or not a mapping."""
    loc = _Loc(file)
    node = _compose(text, file)
    if node is None:
        return {}, loc
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: the top level must be a mapping of settings "
                          "(key: value), see config.example.yaml")
    try:
        return _to_python(node, (), loc), loc
    except RecursionError:
        raise ConfigError(f"{file}: nested too deeply; a config is a few levels of key: value, "
                          "see config.example.yaml") from None
    except yaml.YAMLError as e:  # a scalar PyYAML cannot construct (e.g. a bad timestamp)
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{file}{line}: not valid YAML: {' '.join(str(getattr(e, 'problem', e)).split())}; "
                          "fix the value there") from None
