"""Throwaway TLS material for tests and benchmarks, made with the `openssl` command (never for production).

`make_pki(dir)` writes a CA and certificates signed by it, all PEM, each certificate beside its key:

    ca.pem                          the CA certificate (a truststore: `ssl.truststore.location`, `ssl.ca.location`)
    <name>.pem, <name>.key          a certificate and its unencrypted key
    <name>-keystore.pem             the key and the certificate in one file (`ssl.keystore.location`)

The same `openssl` commands, spelled out, are in docs/security.md.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from broker.errors import KafkactlError


@dataclass(frozen=True)
class Pki:
    """Where `make_pki` put things."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    def keystore(self, name: str) -> Path:
        return self.directory / f"{name}-keystore.pem"


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise KafkactlError("the openssl command is not installed (Debian: apt-get install openssl)")
    done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise KafkactlError(f"openssl {args[0]} failed: {done.stderr.strip()[-300:]}")


def make_ca(directory: Path, name: str = "ca", subject: str = "/CN=kafkactl test CA") -> None:
    """A self-signed CA certificate `<name>.pem` and its key `<name>.key` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "3650", "-subj", subject, cwd=directory)  # fmt: skip


def make_cert(directory: Path, name: str, subject: str, *, ca: str = "ca", hosts: tuple[str, ...] = (),
              days: int = 3650) -> None:  # fmt: skip
    """A certificate `<name>.pem` for `subject` signed by `ca`, with `hosts` (IPs or DNS names) as subject
    alternative names; `days` may be negative for one that has expired. Also `<name>-keystore.pem`."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=directory)  # fmt: skip
    extra: list[str] = []
    if hosts:
        names = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
        (directory / f"{name}.ext").write_text(f"subjectAltName={names}\n")
        extra = ["-extfile", f"{name}.ext"]
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", str(days), *extra, cwd=directory)  # fmt: skip
    (directory / f"{name}-keystore.pem").write_text((directory / f"{name}.key").read_text() +
                                                    (directory / f"{name}.pem").read_text())  # fmt: skip


def make_pki(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> Pki:
    """A CA, a broker certificate for `hosts` (`broker`), a client certificate (`client`, subject
    `CN=client,OU=test,O=kafkactl`) and the same client's certificate expired a day ago (`expired`);
    plus a second CA (`other-ca`) and a client certificate it signed (`stranger`), which the first CA's
    truststore does not trust."""
    make_ca(directory)
    make_cert(directory, "broker", "/CN=localhost", hosts=hosts)
    make_cert(directory, "client", "/O=kafkactl/OU=test/CN=client")
    make_cert(directory, "expired", "/O=kafkactl/OU=test/CN=client", days=-1)
    make_ca(directory, "other-ca", "/CN=someone else's CA")
    make_cert(directory, "stranger", "/O=kafkactl/OU=test/CN=client", ca="other-ca")
    return Pki(directory)
