"""TLS settings: off unless a certificate is given, and every file checked before anything
starts, with a message that names the variable and the path."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest
import trustme

from core.settings import Settings, SettingsError
from core.tls import TlsSettings, server_context
from tests.certs import TestPki


@pytest.fixture
def pki(tmp_path: Path) -> TestPki:
    return TestPki(tmp_path)


def test_without_tls_variables_tls_is_off_and_the_settings_are_the_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.tls == TlsSettings() and not settings.tls.enabled
    assert settings.scheme == "http"


def test_a_certificate_and_its_key_turn_tls_on_for_https(pki: TestPki) -> None:
    settings = Settings.from_env(pki.env())
    assert settings.tls.enabled and settings.scheme == "https"
    assert settings.tls.client_auth == "none"
    assert server_context(settings.tls).verify_mode == ssl.CERT_NONE


def test_a_client_ca_asks_for_client_certificates_unless_told_optional(pki: TestPki) -> None:
    required = Settings.from_env(pki.env(client_ca=True)).tls
    assert required.client_auth == "required"
    assert server_context(required).verify_mode == ssl.CERT_REQUIRED
    optional = Settings.from_env(pki.env(client_ca=True, TLS_CLIENT_AUTH="optional")).tls
    assert server_context(optional).verify_mode == ssl.CERT_OPTIONAL


@pytest.mark.parametrize(("drop", "message"), [
    ("TLS_KEY_FILE", "TLS_CERT_FILE is set but TLS_KEY_FILE is not"),
    ("TLS_CERT_FILE", "TLS_KEY_FILE is set but TLS_CERT_FILE is not"),
])
def test_half_a_pair_is_refused(pki: TestPki, drop: str, message: str) -> None:
    env = pki.env()
    del env[drop]
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


def test_client_authentication_without_a_ca_or_a_ca_without_tls_is_refused(
        pki: TestPki) -> None:
    with pytest.raises(SettingsError, match="TLS_CLIENT_AUTH=required needs TLS_CLIENT_CA_FILE"):
        Settings.from_env(pki.env(TLS_CLIENT_AUTH="required"))
    with pytest.raises(SettingsError, match="TLS_CLIENT_CA_FILE is set but TLS_CERT_FILE"):
        Settings.from_env({"TLS_CLIENT_CA_FILE": str(pki.client_ca_file)})
    with pytest.raises(SettingsError, match="TLS_CLIENT_AUTH='sometimes'"):
        Settings.from_env(pki.env(client_ca=True, TLS_CLIENT_AUTH="sometimes"))


def test_a_missing_file_is_named_with_its_path(pki: TestPki, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.pem"
    with pytest.raises(SettingsError, match=re.escape(
            f"TLS_CERT_FILE={missing}: No such file or directory")):
        Settings.from_env(pki.env(TLS_CERT_FILE=str(missing)))
    with pytest.raises(SettingsError, match=re.escape(f"TLS_KEY_FILE={missing}")):
        Settings.from_env(pki.env(TLS_KEY_FILE=str(missing)))
    with pytest.raises(SettingsError, match=re.escape(f"TLS_CLIENT_CA_FILE={missing}")):
        Settings.from_env(pki.env(TLS_CLIENT_CA_FILE=str(missing)))


def test_a_key_that_is_not_the_certificates_is_refused(pki: TestPki, tmp_path: Path) -> None:
    other = trustme.CA().issue_cert("127.0.0.1")
    other_key = tmp_path / "other.key"
    other.private_key_pem.write_to_path(str(other_key))
    with pytest.raises(SettingsError, match=re.escape(
            f"TLS_KEY_FILE={other_key} is not the private key of the (first) certificate in "
            f"TLS_CERT_FILE={pki.cert_file}")):
        Settings.from_env(pki.env(TLS_KEY_FILE=str(other_key)))


def test_files_of_the_wrong_kind_are_named(pki: TestPki) -> None:
    with pytest.raises(SettingsError, match="TLS_CERT_FILE=.*server.key holds no PEM certificate"):
        Settings.from_env(pki.env(TLS_CERT_FILE=str(pki.key_file)))
    with pytest.raises(SettingsError, match="TLS_KEY_FILE=.*server.pem holds no PEM private key"):
        Settings.from_env(pki.env(TLS_KEY_FILE=str(pki.cert_file)))
    with pytest.raises(SettingsError, match="TLS_CLIENT_CA_FILE=.* holds no PEM certificate"):
        Settings.from_env(pki.env(TLS_CLIENT_CA_FILE=str(pki.key_file)))


def test_an_encrypted_key_is_refused_with_the_reason(pki: TestPki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.key_file.read_bytes(), password=None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    with pytest.raises(SettingsError, match="TLS_KEY_FILE=.*locked.key is encrypted"):
        Settings.from_env(pki.env(TLS_KEY_FILE=str(locked)))
