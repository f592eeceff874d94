"""SCRAM both ways: RFC 7677's test vector, the server's checks, and Kafka's credential string."""

import base64

import pytest

from broker.security.scram import ScramClient, ScramCredential, ScramError, ScramServer, make_credential

# RFC 7677, section 3
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector_client_and_server() -> None:
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, salt=RFC_SALT)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    server = ScramServer("SCRAM-SHA-256", {"user": cred}.get, nonce=RFC_SERVER_NONCE)
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.step(client.first_message())
    assert server_first == f"r={RFC_NONCE}{RFC_SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    final = client.final_message(server_first)
    assert final == RFC_CLIENT_FINAL
    server_final = server.step(final)
    assert server_final == RFC_SERVER_FINAL
    client.verify_server_final(server_final)
    assert server.done and server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_and_wrong_password(mechanism: str) -> None:
    cred = ScramCredential.decode(make_credential(mechanism, "s3cret,=x", 8192).encode())
    assert cred.iterations == 8192 and cred.check_password(mechanism, "s3cret,=x")
    assert not cred.check_password(mechanism, "s3cret")
    lookup = {"a,b=c": cred}.get
    client, server = ScramClient(mechanism, "a,b=c", "s3cret,=x"), ScramServer(mechanism, lookup)
    client.verify_server_final(server.step(client.final_message(server.step(client.first_message()))))
    assert server.username == "a,b=c"
    wrong, server = ScramClient(mechanism, "a,b=c", "guess"), ScramServer(mechanism, lookup)
    with pytest.raises(ScramError, match="invalid credentials"):
        server.step(wrong.final_message(server.step(wrong.first_message())))


def test_server_refuses_unknown_users_and_garbage() -> None:
    server = ScramServer("SCRAM-SHA-256", {}.get)
    with pytest.raises(ScramError, match="unknown user"):
        server.step(b"n,,n=nobody,r=abc")
    for junk in (b"", b"n,,", b"p=tls-unique,,n=a,r=b", b"n,,r=abc,n=a", b"\xff\xfe"):
        with pytest.raises(ScramError):
            ScramServer("SCRAM-SHA-256", {"a": make_credential("SCRAM-SHA-256", "x")}.get).step(junk)
    with pytest.raises(ScramError, match="iterations"):
        make_credential("SCRAM-SHA-256", "x", 100)
