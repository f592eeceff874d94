"""`kafkactl schema-registry`: Confluent Schema Registry's REST API over `SchemaStore`, for Avro schemas.

Served (JSON bodies, `application/vnd.schemaregistry.v1+json`):

    GET    /subjects                                      ?deleted=true
    GET    /subjects/<s>/versions                         ?deleted=true
    GET    /subjects/<s>/versions/<v|latest>              ?deleted=true
    GET    /subjects/<s>/versions/<v|latest>/schema       the schema alone
    POST   /subjects/<s>/versions      {"schema"}         register: {"id"}
    POST   /subjects/<s>               {"schema"}         look up: {"subject","version","id","schema"}
    DELETE /subjects/<s>                                  ?permanent=true
    DELETE /subjects/<s>/versions/<v|latest>              ?permanent=true
    GET    /schemas/ids/<id>                              {"schema"}
    GET    /schemas/ids/<id>/schema | /versions | /subjects
    GET    /schemas/types                                 ["AVRO"]
    POST   /compatibility/subjects/<s>/versions/<v|latest>   {"is_compatible"}  ?verbose=true: "messages"
    GET    /config, PUT /config {"compatibility"}
    GET    /config/<s> ?defaultToGlobal=true, PUT /config/<s>, DELETE /config/<s>

Errors are Confluent's: `{"error_code": 40401, "message": "Subject 'x' not found."}` with HTTP status
404 (the code's first three digits), 409 for an incompatible schema, 422 for an invalid one.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kazoo.exceptions import KazooException

from broker.schema_registry.store import RegistryError, SchemaStore

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY = 16 << 20

Handler = Callable[["Request"], Any]


class Request:
    def __init__(self, store: SchemaStore, match: re.Match, query: dict[str, str], body: Any) -> None:
        self.store, self.match, self.query, self.body = store, match, query, body

    def arg(self, name: str) -> str:
        return urllib.parse.unquote(self.match[name])

    def flag(self, name: str) -> bool:
        return self.query.get(name, "false").lower() == "true"

    def schema_text(self) -> str:
        if not isinstance(self.body, dict) or not isinstance(self.body.get("schema"), str):
            raise RegistryError(42201, 'Invalid schema: the body has no "schema" string')
        kind = self.body.get("schemaType", "AVRO") or "AVRO"
        if kind != "AVRO":
            raise RegistryError(42201, f"Invalid schema: schema type {kind} is not supported (only AVRO)")
        if self.body.get("references"):
            raise RegistryError(42201, "Invalid schema: schema references are not supported")
        return self.body["schema"]


def _version(r: Request) -> Any:
    return r.store.version(r.arg("subject"), r.arg("version"), deleted=r.flag("deleted")).to_json()


def _subject_level(r: Request) -> Any:
    subject = r.arg("subject")
    level = r.store.subject_level(subject)
    if level is None:
        if not r.flag("defaultToGlobal"):
            raise RegistryError(40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        level = r.store.global_level()
    return {"compatibilityLevel": level}


def _set_level(r: Request, subject: str | None) -> Any:
    if not isinstance(r.body, dict) or "compatibility" not in r.body:
        raise RegistryError(42203, 'Invalid compatibility level: the body has no "compatibility"')
    return {"compatibility": r.store.set_level(r.body["compatibility"], subject)}


def _compatibility(r: Request) -> Any:
    problems = r.store.check(r.arg("subject"), r.arg("version"), r.schema_text())
    out: dict[str, Any] = {"is_compatible": not problems}
    if r.flag("verbose"):
        out["messages"] = problems
    return out


def _lookup(r: Request) -> Any:
    return r.store.lookup(r.arg("subject"), r.schema_text()).to_json()


def _schema_by_id(r: Request) -> Any:
    return {"schema": r.store.schema_by_id(int(r.arg("id")))}


def _schema_subjects(r: Request) -> Any:
    return sorted({d["subject"] for d in r.store.ids_versions(int(r.arg("id")))})


_S = r"(?P<subject>[^/]+)"
_V = r"(?P<version>[^/]+)"
ROUTES: list[tuple[str, re.Pattern[str], Handler]] = [(m, re.compile(p + r"/?"), h) for m, p, h in [
    ("GET", r"/", lambda r: {}),
    ("GET", r"/subjects", lambda r: r.store.subjects(deleted=r.flag("deleted"))),
    ("GET", rf"/subjects/{_S}/versions", lambda r: r.store.versions(r.arg("subject"), deleted=r.flag("deleted"))),
    ("GET", rf"/subjects/{_S}/versions/{_V}", _version),
    ("GET", rf"/subjects/{_S}/versions/{_V}/schema",
     lambda r: json.loads(r.store.version(r.arg("subject"), r.arg("version")).schema)),
    ("POST", rf"/subjects/{_S}/versions", lambda r: {"id": r.store.register(r.arg("subject"), r.schema_text())}),
    ("POST", rf"/subjects/{_S}", _lookup),
    ("DELETE", rf"/subjects/{_S}", lambda r: r.store.delete_subject(r.arg("subject"), r.flag("permanent"))),
    ("DELETE", rf"/subjects/{_S}/versions/{_V}",
     lambda r: r.store.delete_version(r.arg("subject"), r.arg("version"), r.flag("permanent"))),
    ("GET", r"/schemas/ids/(?P<id>\d+)", _schema_by_id),
    ("GET", r"/schemas/ids/(?P<id>\d+)/schema", lambda r: json.loads(r.store.schema_by_id(int(r.arg("id"))))),
    ("GET", r"/schemas/ids/(?P<id>\d+)/versions", lambda r: r.store.ids_versions(int(r.arg("id")))),
    ("GET", r"/schemas/ids/(?P<id>\d+)/subjects", _schema_subjects),
    ("GET", r"/schemas/types", lambda r: ["AVRO"]),
    ("POST", rf"/compatibility/subjects/{_S}/versions/{_V}", _compatibility),
    ("GET", r"/config", lambda r: {"compatibilityLevel": r.store.global_level()}),
    ("PUT", r"/config", lambda r: _set_level(r, None)),
    ("GET", rf"/config/{_S}", _subject_level),
    ("PUT", rf"/config/{_S}", lambda r: _set_level(r, r.arg("subject"))),
    ("DELETE", rf"/config/{_S}", lambda r: {"compatibilityLevel": r.store.delete_level(r.arg("subject"))}),
]]  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    server_version = "kafkactl-schema-registry"
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a client may stay silent, mid-request or between keep-alive requests
    store: SchemaStore  # set on the class made per server

    def _serve(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        try:
            body = self._body()
            for m, pattern, handler in ROUTES:
                match = pattern.fullmatch(url.path)
                if match and m == method:
                    self._answer(200, handler(Request(self.store, match, query, body)))
                    return
            if any(p.fullmatch(url.path) for _, p, _ in ROUTES):
                self._answer(405, {"error_code": 405, "message": "HTTP 405 Method Not Allowed"})
            else:
                self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
        except RegistryError as exc:
            self._answer(exc.http_status, {"error_code": exc.code, "message": exc.message})
        except KazooException as exc:
            log.warning("ZooKeeper: %s", exc)
            self._answer(500, {"error_code": 50001, "message": f"Error in the backend data store: {exc}"})
        except Exception as exc:  # a bug must cost one request, not the server
            log.exception("request %s %s failed", method, self.path)
            self._answer(500, {"error_code": 50001, "message": f"{type(exc).__name__}: {exc}"})

    def _body(self) -> Any:
        text = self.headers.get("Content-Length") or "0"
        if not text.isdigit():
            self.close_connection = True  # the body's end is unknown: this connection cannot go on
            raise RegistryError(400, f"Content-Length {text!r} is not a byte count")
        length = int(text)
        if length > MAX_BODY:
            self.close_connection = True  # (the body is not read)
            raise RegistryError(413, f"request body of {length} bytes is over {MAX_BODY}")
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except ValueError:
            raise RegistryError(400, "the request body is not JSON") from None

    def _answer(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


class RegistryServer:
    """The REST server on host:port, backed by a store; `serve_forever` until `shutdown`."""

    def __init__(self, store: SchemaStore, host: str = "127.0.0.1", port: int = 8081) -> None:
        handler = type("Handler", (_Handler,), {"store": store})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="schema-registry", daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
