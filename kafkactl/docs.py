"""Man pages and shell completion scripts generated from the command tree, so they never drift.

`python scripts/gen_docs.py` writes them into `man/` and `completions/`; a test regenerates them
in memory and fails when the committed files are stale.
"""

from __future__ import annotations

import enum
import inspect as pyinspect
from typing import Any

from typer._completion_shared import get_completion_script

from broker import __version__
from kafkactl.app import COMPLETE_VAR, command

PROG = "kafkactl"
SHELLS = {"bash": "kafkactl.bash", "zsh": "_kafkactl", "fish": "kafkactl.fish"}


def _esc(text: str) -> str:
    out = text.replace("\\", "\\\\").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in out.splitlines())


def _walk(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, cmd)]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            found += _walk(sub, [*path, name])
    return found


def _help(cmd: Any) -> str:
    return pyinspect.cleandoc(cmd.help or "")


def _synopsis(cmd: Any) -> str:
    args = []
    for p in cmd.params:
        if p.param_type_name == "argument":
            name = p.name.upper() + ("..." if p.nargs == -1 else "")
            args.append(name if p.required else f"[{name}]")
    if getattr(cmd, "commands", None):
        args.append("COMMAND [ARGS]...")
    return " ".join(["[OPTIONS]", *args])


def _option_lines(cmd: Any) -> list[str]:
    lines = []
    for p in cmd.params:
        if p.param_type_name != "option" or p.hidden:
            continue
        flags = ", ".join(f"\\fB{_esc(o)}\\fR" for o in [*p.opts, *p.secondary_opts])
        if not p.is_flag:
            flags += " " + _esc(_metavar(p))
        text = _esc(p.help or "")
        if p.default not in (None, False, ()) and not p.is_flag:
            default = getattr(p.default, "value", p.default)
            text += f" (default: {_esc(str(default))})"
        if getattr(p, "envvar", None):
            text += f" [env: {_esc(str(p.envvar))}]"
        lines += [".TP", flags, text]
    lines += [".TP", "\\fB\\-h\\fR, \\fB\\-\\-help\\fR", "Show the help and exit."]
    return lines


def _metavar(p: Any) -> str:
    ann = p.type_descriptor.annotation
    args = [a for a in getattr(ann, "__args__", ()) if a is not type(None)]
    ann = args[0] if args else ann
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return "{" + "|".join(str(m.value) for m in ann) + "}"
    return getattr(ann, "__name__", str(ann)).upper()


def man_pages() -> dict[str, str]:
    """File name → roff text, one page per command and group."""
    pages = {}
    for path, cmd in _walk(command(), [PROG]):
        name = "-".join(path)
        text = _help(cmd)
        summary = text.splitlines()[0] if text else ""
        lines = [
            f'.TH "{name.upper()}" "1" "" "{PROG} {__version__}" "kafkactl manual"',
            ".SH NAME", f"{_esc(name)} \\- {_esc(summary)}",
            ".SH SYNOPSIS", f"\\fB{_esc(' '.join(path))}\\fR {_esc(_synopsis(cmd))}",
        ]  # fmt: skip
        if text:
            lines += [".SH DESCRIPTION", *(_esc(par) + "\n.PP" for par in text.split("\n\n"))]
            lines[-1] = lines[-1].removesuffix("\n.PP")
        if getattr(cmd, "commands", None):
            lines.append(".SH COMMANDS")
            for sub_name, sub in sorted(cmd.commands.items()):
                lines += [".TP", f"\\fB{_esc(sub_name)}\\fR", _esc(_help(sub).splitlines()[0] if sub.help else ""),
                          f"See \\fB{_esc(name)}\\-{_esc(sub_name)}\\fR(1)."]  # fmt: skip
        lines += [".SH OPTIONS", *_option_lines(cmd)]
        if len(path) > 1:
            lines += [".SH SEE ALSO", "\\fBkafkactl\\fR(1)"]
        pages[f"{name}.1"] = "\n".join(lines) + "\n"
    return pages


def completions() -> dict[str, str]:
    """File name → completion script for bash, zsh and fish."""
    return {
        fname: get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell).rstrip("\n") + "\n"
        for shell, fname in SHELLS.items()
    }
