"""Where the cluster is: command option > root option > KAFKACTL_* environment > context file > default."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import UsageError
from kafkactl import contexts

CONFIG = """
current-context = "dev"

[contexts.dev]
bootstrap-server = "dev:9092"
zookeeper = "devzk:2181/dev"

[contexts.prod]
bootstrap-server = "prod1:9092,prod2:9092"
zookeeper = "prodzk:2181"

[contexts.partial]
zookeeper = "partialzk:2181"
"""


@pytest.fixture(autouse=True)
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No root options, no KAFKACTL_* variables, XDG_CONFIG_HOME in a temporary dir."""
    for key in ("bootstrap-server", "zookeeper", "context"):
        monkeypatch.setitem(contexts.root, key, None)
    for var in ("KAFKACTL_BOOTSTRAP_SERVER", "KAFKACTL_ZOOKEEPER", "KAFKACTL_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def write_config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "xdg" / "kafkactl" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert contexts.config_path() == tmp_path / "xdg" / "kafkactl" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert contexts.config_path() == tmp_path / "home" / ".config" / "kafkactl" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    assert contexts.config_path() == tmp_path / "home" / ".config" / "kafkactl" / "config.toml"


def test_defaults_without_anything() -> None:
    assert contexts.bootstrap() == "localhost:9092"
    assert contexts.zookeeper() == "localhost:2181"
    assert contexts.schema_registry() == "http://localhost:8081"
    assert contexts.DEFAULTS == {"bootstrap-server": "localhost:9092", "zookeeper": "localhost:2181",
                                 "schema-registry": "http://localhost:8081"}  # fmt: skip


def test_full_precedence_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path)
    monkeypatch.setenv("KAFKACTL_BOOTSTRAP_SERVER", "env:9092")
    monkeypatch.setenv("KAFKACTL_ZOOKEEPER", "envzk:2181")
    monkeypatch.setitem(contexts.root, "bootstrap-server", "root:9092")
    monkeypatch.setitem(contexts.root, "zookeeper", "rootzk:2181")
    # 1. the command's own option
    assert contexts.bootstrap("cmd:9092") == "cmd:9092"
    assert contexts.zookeeper("cmdzk:2181") == "cmdzk:2181"
    # 2. the root option
    assert contexts.bootstrap() == "root:9092"
    assert contexts.zookeeper(None) == "rootzk:2181"
    # 3. the environment
    monkeypatch.setitem(contexts.root, "bootstrap-server", None)
    monkeypatch.setitem(contexts.root, "zookeeper", None)
    assert contexts.bootstrap() == "env:9092"
    assert contexts.zookeeper() == "envzk:2181"
    # 4. the current context of the config file
    monkeypatch.delenv("KAFKACTL_BOOTSTRAP_SERVER")
    monkeypatch.delenv("KAFKACTL_ZOOKEEPER")
    assert contexts.bootstrap() == "dev:9092"
    assert contexts.zookeeper() == "devzk:2181/dev"
    # 5. the defaults
    (tmp_path / "xdg" / "kafkactl" / "config.toml").unlink()
    assert contexts.bootstrap() == "localhost:9092"
    assert contexts.zookeeper() == "localhost:2181"


def test_empty_values_do_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKACTL_BOOTSTRAP_SERVER", "env:9092")
    monkeypatch.setitem(contexts.root, "bootstrap-server", "")
    assert contexts.bootstrap("") == "env:9092"
    monkeypatch.setenv("KAFKACTL_BOOTSTRAP_SERVER", "")
    assert contexts.bootstrap() == "localhost:9092"


def test_each_key_resolves_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path)
    monkeypatch.setenv("KAFKACTL_ZOOKEEPER", "envzk:2181")
    assert contexts.zookeeper() == "envzk:2181"
    assert contexts.bootstrap() == "dev:9092"


def test_named_context_by_root_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path)
    monkeypatch.setitem(contexts.root, "context", "prod")
    assert contexts.bootstrap() == "prod1:9092,prod2:9092"
    assert contexts.zookeeper() == "prodzk:2181"


def test_named_context_by_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path)
    monkeypatch.setenv("KAFKACTL_CONTEXT", "prod")
    assert contexts.bootstrap() == "prod1:9092,prod2:9092"
    monkeypatch.setitem(contexts.root, "context", "dev")  # the option wins over the variable
    assert contexts.bootstrap() == "dev:9092"


def test_context_missing_a_key_falls_back_to_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path)
    monkeypatch.setitem(contexts.root, "context", "partial")
    assert contexts.zookeeper() == "partialzk:2181"
    assert contexts.bootstrap() == "localhost:9092"


def test_no_current_context_means_defaults(tmp_path: Path) -> None:
    write_config(tmp_path, '[contexts.a]\nbootstrap-server = "a:1"\n')
    assert contexts.bootstrap() == "localhost:9092"


def test_unknown_context_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path)
    monkeypatch.setitem(contexts.root, "context", "staging")
    with pytest.raises(UsageError, match="no context 'staging'") as exc:
        contexts.bootstrap()
    assert str(path) in str(exc.value) and "dev, partial, prod" in str(exc.value)
    assert exc.value.exit_code == 2


def test_unknown_current_context_is_a_usage_error(tmp_path: Path) -> None:
    write_config(tmp_path, 'current-context = "gone"\n')
    with pytest.raises(UsageError, match=r"no context 'gone' .*\(have: none\)"):
        contexts.zookeeper()


def test_named_context_without_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKACTL_CONTEXT", "dev")
    with pytest.raises(UsageError, match="context 'dev' named, but .* does not exist"):
        contexts.bootstrap()


def test_bad_toml_is_a_usage_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, "current-context = \n[[[")
    with pytest.raises(UsageError, match="cannot read") as exc:
        contexts.bootstrap()
    assert str(path) in str(exc.value)


def test_explicit_values_do_not_read_the_config_file(tmp_path: Path) -> None:
    write_config(tmp_path, "not toml at all [[[")
    assert contexts.bootstrap("cmd:1") == "cmd:1"


def test_named_context_is_checked_even_when_an_option_gives_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(tmp_path)
    monkeypatch.setitem(contexts.root, "context", "typo")
    with pytest.raises(UsageError, match="no context 'typo'"):
        contexts.bootstrap("explicit:9092")
