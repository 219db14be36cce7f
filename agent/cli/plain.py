"""The plainest forms of the commonest commands, read without argparse.

``fleet-agent alerts list``, ``status --json``, ``say --pin TEXT``: importing argparse and building even one
command's parser costs more than such a command's own work. ``parse`` reads a form it knows completely into
the namespace argparse would give (the same names, values and order; tests/test_cli_plain.py compares the two
over every form), and gives None for anything else, which then goes to the parser: help, usage errors,
abbreviated options, ``--``, a value that starts with ``-``, an option repeated where argparse would complain,
a word where none is taken.

The forms: ``[--config FILE | --config=FILE]`` (any number of times, the last one counts), the command, its
subcommand when it has them, then the command's own options and words in any order argparse accepts them:
flags (``--json``), options with one value (``--by NAME`` or ``--by=NAME``, the last one counts) and one
run of words (``say``'s text, not broken by an option).
"""

from __future__ import annotations

from types import SimpleNamespace

from agent.cli import group_module

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

FLAG, VALUE, WORDS = "flag", "value", "words"

# (command, subcommand or None) -> (the group module, its handler, the arguments in the order the group's
# register() adds them: (FLAG, dest) a store_true ``--dest``; (VALUE, dest) ``--dest`` with one value, default
# None; (WORDS, dest) one or more words). A change to one of these commands' arguments in its register() is
# a change here too: the comparison with argparse fails until it is made.
FORMS: dict[tuple[str, str | None], tuple[str, str, tuple[tuple[str, str], ...]]] = {
    ("alerts", "list"): ("feedback", "cmd_alerts_list", ((FLAG, "all"), (FLAG, "json"))),
    ("alerts", "silences"): ("feedback", "cmd_alerts_silences", ((FLAG, "all"), (FLAG, "json"))),
    ("directives", None): ("feedback", "cmd_directives", ((FLAG, "json"),)),
    ("knowledge", "list"): ("feedback", "cmd_knowledge_list", ((FLAG, "json"),)),
    ("say", None): ("feedback", "cmd_say", ((WORDS, "text"), (VALUE, "by"), (FLAG, "pin"))),
    ("status", None): ("service", "cmd_status", ((FLAG, "json"),)),
}


def _config(argv: list[str]) -> tuple[str | None, int] | None:
    """The ``--config`` value (None when not given) and where the command starts; None for any other option."""
    config, i = None, 0
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a.startswith("--config="):
            config, i = a[len("--config="):], i + 1
        elif a == "--config" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            config, i = argv[i + 1], i + 2
        else:
            return None
    return config, i


def _arguments(rest: list[str], spec: tuple[tuple[str, str], ...]) -> dict[str, object] | None:
    """The command's own arguments read from ``rest`` (dest -> value, in ``spec``'s order), or None."""
    options = {"--" + dest: kind for kind, dest in spec if kind != WORDS}
    words_dest = next((dest for kind, dest in spec if kind == WORDS), None)
    values: dict[str, object] = {dest: False if kind == FLAG else None for kind, dest in spec}
    words: list[str] = []
    j, words_ended = 0, False
    while j < len(rest):
        a = rest[j]
        if not a.startswith("-"):
            if words_dest is None or words_ended:
                return None
            words.append(a)
        else:
            name, eq, given = a.partition("=")
            kind = options.get(name)
            if kind is None or (kind == FLAG and eq):
                return None
            if kind == VALUE and not eq:
                if j + 1 >= len(rest) or rest[j + 1].startswith("-"):
                    return None
                j, given = j + 1, rest[j + 1]
            values[name[2:]] = True if kind == FLAG else given
            words_ended = bool(words)
        j += 1
    if words_dest is not None:
        if not words:
            return None
        values[words_dest] = words
    return values


def parse(argv: list[str]) -> argparse.Namespace | None:
    """The namespace argparse would give for ``argv`` when it is one of the forms above, else None."""
    start = _config(argv)
    if start is None or start[1] >= len(argv):
        return None
    config, i = start
    command = argv[i]
    sub = argv[i + 1] if i + 1 < len(argv) else None
    key: tuple[str, str | None]
    if (command, None) in FORMS:
        key, rest = (command, None), argv[i + 1:]
    elif (command, sub) in FORMS:
        key, rest = (command, sub), argv[i + 2:]
    else:
        return None
    group, handler, spec = FORMS[key]
    values = _arguments(rest, spec)
    if values is None:
        return None
    ns: dict[str, object] = {"config": config, "command": command}
    if key[1] is not None:
        ns[f"{command}_command"] = key[1]
    ns.update(values)
    ns["func"] = getattr(group_module(group), handler)
    # Handlers read attributes, as of argparse's Namespace; the annotation says what they take.
    read: argparse.Namespace = SimpleNamespace(**ns)  # type: ignore[assignment]
    return read
