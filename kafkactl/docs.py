"""Man pages and shell completion scripts generated from the command tree, so they never drift.

`python scripts/gen_docs.py` writes them into `man/` and `completions/`; a test regenerates them
in memory and fails when the committed files are stale.
"""

from __future__ import annotations

import enum
import inspect as pyinspect
from pathlib import Path
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


def _summary(cmd: Any) -> str:
    """The first paragraph of a command's help, on one line (not cut at its first line break)."""
    return " ".join(_help(cmd).split("\n\n")[0].split())


#: the variables every command reads (docs/contexts.md has the whole story)
ENVIRONMENT = [
    ("KAFKACTL_BOOTSTRAP_SERVER", "Brokers to start from, when no -b is given."),
    ("KAFKACTL_ZOOKEEPER", "ZooKeeper (host:port[/chroot]), when no -z is given."),
    ("KAFKACTL_CONTEXT", "The context of config.toml to use instead of its current-context."),
    ("KAFKACTL_HOME", "Where kafkactl keeps pid files, daemon logs, default log dirs and local clusters "
                      "(default ~/.local/share/kafkactl)."),
    ("KAFKACTL_DEBUG", "Like --debug: tracebacks and debug logs."),
    ("XDG_CONFIG_HOME", "Holds kafkactl/config.toml, the contexts (default ~/.config)."),
]  # fmt: skip


def _examples(path: list[str]) -> list[str]:
    """The README's example lines of exactly this command (so the man pages show what the README runs)."""
    readme = Path(__file__).resolve().parents[1] / "README.md"
    if not readme.is_file():
        return []
    prefix = " ".join(path) + " "
    sub = {" ".join([*path, name]) + " " for name in getattr(_command_at(path), "commands", {})}
    out = []
    for line in readme.read_text().splitlines():
        if line.startswith(prefix) and not any(line.startswith(s) for s in sub) and line not in out:
            out.append(line)
    return out


def _command_at(path: list[str]) -> Any:
    cmd = command()
    for name in path[1:]:
        cmd = cmd.commands[name]
    return cmd


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
        summary = _summary(cmd)
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
                lines += [".TP", f"\\fB{_esc(sub_name)}\\fR", _esc(_summary(sub)),
                          f"See \\fB{_esc(name)}\\-{_esc(sub_name)}\\fR(1)."]  # fmt: skip
        lines += [".SH OPTIONS", *_option_lines(cmd)]
        examples = _examples(path)
        if examples:
            lines += [".SH EXAMPLES", ".nf", *(_esc(e) for e in examples), ".fi"]
        lines.append(".SH ENVIRONMENT")
        for var, what in ENVIRONMENT:
            lines += [".TP", f"\\fB{_esc(var)}\\fR", _esc(what)]
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
