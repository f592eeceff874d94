"""The root `kafkactl` app: global options, one sub-app per noun, and errors turned into exit codes.

Every failure a user can cause ends as one line on stderr, `kafkactl: error: …`, with a non-zero
exit code (2 for usage errors); a traceback is printed only with `--debug`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Annotated

import typer
from kazoo.exceptions import NoAuthError
from typer._click.exceptions import NoArgsIsHelpError
from typer.completion import completion_init
from typer.exceptions import Abort, Exit
from typer.main import get_command

from broker import __version__
from broker.client import properties
from broker.errors import KafkactlError
from kafkactl import contexts
from kafkactl.render import error_line

Security = contexts.security_option(
    "A security setting KEY=VALUE by librdkafka's names (repeatable; over the context's): "
    "security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location, ssl.key.password, "
    "ssl.endpoint.identification.algorithm, sasl.mechanism, sasl.username, sasl.password."
)

#: every top-level command: name → (module of kafkactl.commands, its Typer app or command function), in the
#: order of `kafkactl --help`. A command's module is imported only when the command runs (or help lists them
#: all): `kafkactl topic list` does not load the broker, Spark or the benchmarks.
COMMANDS: dict[str, tuple[str, str]] = {
    "inspect": ("inspect", "app"),
    "recover": ("recover", "recover"),
    "bench": ("bench", "app"),
    "zookeeper": ("zookeeper", "app"),
    "broker": ("broker", "app"),
    "cluster": ("cluster", "app"),
    "topic": ("topic", "app"),
    "produce": ("produce", "produce"),
    "consume": ("consume", "consume"),
    "group": ("group", "app"),
    "zk": ("zk", "app"),
    "config": ("config", "app"),
    "spark-load": ("spark_load", "spark_load"),
    "mirror": ("mirror", "app"),
    "audit": ("audit", "audit"),
    "schema-registry": ("schema_registry", "app"),
    "user": ("user", "app"),
    "acl": ("acl", "app"),
    "quota": ("quota", "app"),
    "txn": ("txn", "app"),
}
#: the root options that take a value (`_command_named` skips it)
_VALUED = {"-b", "--bootstrap-server", "-z", "--zookeeper", "--context", "-X", "--security"}


def _app(only: str | None = None) -> typer.Typer:
    """The Typer app with every command, or with only the command named `only`."""
    app = typer.Typer(
        name="kafkactl",
        help="Run and operate a Kafka-style commit log: brokers, topics, clients, inspection and recovery.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(root)
    for name, (module, attr) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(f"kafkactl.commands.{module}"), attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    return app


def _command_named(argv: list[str]) -> str | None:
    """The top-level command `argv` runs; "" for none at all (`--version`); None when it names none (bare,
    `--help`, a typo: the whole tree then)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in COMMANDS:
            return arg
        elif arg == "--version":
            return ""
        elif arg.startswith("-"):
            skip = arg in _VALUED
        else:
            return None
    return None


_state = {"debug": False}

#: the variable a shell sets to ask for completions (the scripts in completions/ name it)
COMPLETE_VAR = "_KAFKACTL_COMPLETE"


def _version(value: bool) -> None:
    if value:
        print(f"kafkactl {__version__}")
        raise Exit(0)


def root(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and debug logs.", envvar="KAFKACTL_DEBUG")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    bootstrap: contexts.Bootstrap = None,
    zookeeper: contexts.ZooKeeper = None,
    context: Annotated[
        str | None, typer.Option("--context", help="A context of ~/.config/kafkactl/config.toml.", show_default=False)
    ] = None,
    security: Security = None,
) -> None:
    """kafkactl: a Kafka-style distributed commit log and the tools to operate it."""
    _state["debug"] = debug
    contexts.root.update({"bootstrap-server": bootstrap, "zookeeper": zookeeper, "context": context})
    contexts.set_root_security(properties.pairs(security or [], "-X"))
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not debug:  # kazoo's retry chatter; what matters reaches the user as kafkactl's own one line
        logging.getLogger("kazoo").setLevel(logging.ERROR)


def command(only: str | None = None):  # noqa: ANN201 (a click group)
    """The click command tree behind the app (for docs, completions and tests), or the part `only` needs."""
    return get_command(_app(only))


def _plain_help(cmd) -> None:  # noqa: ANN001 (a click command or group)
    """Help as plain text (click's: no panels of box drawing, no colours), for a pipe or a file, where boxes
    squeezed into 80 columns only get in the way of grep and less."""
    cmd.rich_markup_mode = None
    for sub in getattr(cmd, "commands", {}).values():
        _plain_help(sub)


def run(argv: list[str]) -> int:
    """Run kafkactl with `argv`; returns the exit code instead of exiting."""
    _state["debug"] = "--debug" in argv
    if os.environ.get(COMPLETE_VAR):  # a shell asking for completions (the scripts in completions/)
        completion_init()  # (typer registers its bash/zsh/fish classes only with add_completion=True)
    try:
        cli = command(None if os.environ.get(COMPLETE_VAR) else _command_named(argv))
        if not sys.stdout.isatty():
            _plain_help(cli)
        rv = cli.main(args=argv, prog_name="kafkactl", standalone_mode=False)
        return rv if isinstance(rv, int) else 0  # without standalone mode, Exit(n) comes back as n
    except Exit as exc:
        return exc.exit_code
    except Abort:
        error_line("aborted")
        return 130
    except KeyboardInterrupt:
        error_line("interrupted")
        return 130
    except KafkactlError as exc:
        if _state["debug"]:
            raise
        error_line(str(exc))
        return exc.exit_code
    except NoArgsIsHelpError as exc:  # a group called bare: its help (rich mode has printed it already), exit 2
        message = exc.format_message()
        if message:
            print(message)
        return exc.exit_code
    except typer.TyperException as exc:  # usage errors from the parser
        message = exc.format_message()
        if message:  # empty when a group was called bare and has already printed its help
            error_line(message)
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except NoAuthError:  # ZooKeeper's ACLs (zookeeper.set.acl) refused a change or a read
        if _state["debug"]:
            raise
        error_line("ZooKeeper refused: this session lacks the permission (give the cluster's ZooKeeper credentials "
                   "with KAFKACTL_ZOOKEEPER_AUTH=user:password or the context's zookeeper-auth)")  # fmt: skip
        return 1
    except Exception as exc:  # a bug: still one line unless --debug
        if _state["debug"]:
            raise
        error_line(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return 1


def main() -> None:
    """Console-script entry point."""
    code = run(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    sys.exit(code)
