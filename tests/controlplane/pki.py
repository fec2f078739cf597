"""A throwaway PKI for a loopback control plane, made with ``cryptography`` (no openssl calls, no
hand-written ASN.1): a cluster CA, the API server's serving certificate, client certificates for the
components and for tests (``O=system:masters`` for cluster-admin), a front-proxy CA, and the service
account signing key pair. EC P-256 keys: fast to make (milliseconds), accepted by every component
(``Authority`` makes RSA 2048 ones too, for the benchmarks' TLS comparisons).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KEY_TYPES", "Authority", "KeyPair", "make_pki"]

_VALID = datetime.timedelta(days=30)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


#: The key types ``Authority`` makes: EC P-256 (the default), RSA 2048.
KEY_TYPES = ("ec", "rsa")
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def _new_key(key_type: str = "ec") -> PrivateKey:
    if key_type not in KEY_TYPES:
        raise ValueError(f"key type must be one of {', '.join(KEY_TYPES)}, not {key_type!r}")
    return ec.generate_private_key(ec.SECP256R1()) if key_type == "ec" else rsa.generate_private_key(65537, 2048)


def _write_key(key: PrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


_CA_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


class Authority:
    """A certificate authority that issues serving and client certificates into ``folder``, its
    own key and theirs of ``key_type`` (``KEY_TYPES``)."""

    def __init__(self, folder: Path, name: str, common_name: str, *, key_type: str = "ec") -> None:
        self.folder = folder
        self.name = name
        self.key_type = key_type
        self._key = _new_key(key_type)
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_CA_USAGE, critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pair = KeyPair(folder / f"{name}.crt", folder / f"{name}.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self._key, self.pair.key)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        server: bool = False,
        hosts: tuple[str, ...] = (),
    ) -> KeyPair:
        """A certificate for ``common_name`` (a user and its groups, or a server with ``hosts``)."""
        key = _new_key(self.key_type)
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(self.folder / f"{name}.crt", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


@dataclass(frozen=True)
class Pki:
    """Everything the control plane's flags name."""

    folder: Path
    ca: Authority
    front_proxy_ca: Authority
    apiserver: KeyPair
    front_proxy_client: KeyPair
    #: The service-account token signing key (private) and its public half.
    service_account_key: Path
    service_account_pub: Path

    def client(self, name: str, user: str, *groups: str) -> KeyPair:
        """A client certificate for ``user`` in ``groups`` (``system:masters``: cluster-admin)."""
        return self.ca.issue(name, user, organizations=groups)


#: The API server's names on loopback and inside the cluster (kubernetes.default.svc ...).
SERVER_HOSTS = (
    "127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)  # fmt: skip


def make_pki(folder: Path) -> Pki:
    """A fresh PKI under ``folder`` (created, mode 700)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca = Authority(folder, "ca", "dra-extender-test-ca")
    front = Authority(folder, "front-proxy-ca", "dra-extender-test-front-proxy-ca")
    apiserver = ca.issue("apiserver", "kube-apiserver", server=True, hosts=SERVER_HOSTS)
    front_client = front.issue("front-proxy-client", "front-proxy-client")
    sa_key = _new_key()
    sa_private, sa_public = folder / "sa.key", folder / "sa.pub"
    _write_key(sa_key, sa_private)
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return Pki(folder, ca, front, apiserver, front_client, sa_private, sa_public)
