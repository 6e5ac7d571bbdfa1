"""Certificates and keys for a throw-away local control plane, made with trustme (a maintained test-PKI
library) and written as PEM files into the control plane's temporary directory.

One CA signs the apiserver's serving certificate and a client certificate per identity (admin in
system:masters, the controller manager, the scheduler); the controller manager also signs with the CA's key.
A separate key signs service-account tokens (kube-apiserver reads its public half from the same file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write(pem: trustme.Blob | bytes, path: Path, private: bool = False) -> Path:
    path.write_bytes(pem.bytes() if isinstance(pem, trustme.Blob) else pem)
    if private:
        path.chmod(0o600)
    return path


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates into `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._ca = trustme.CA(organization_name="gangsolve dev cluster")
        self.pair = CertPair(
            _write(self._ca.cert_pem, directory / "ca.crt"),
            _write(self._ca.private_key_pem, directory / "ca.key", True),
        )

    def issue(
        self,
        name: str,
        *,
        common_name: str,
        organization: str | None = None,
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
    ) -> CertPair:
        """A leaf certificate (good for serving `server_names`/`server_ips` and as a client certificate). A
        client certificate gets its file name as its one DNS name: Go rejects an empty, critical SAN extension."""
        identities = (*server_names, *server_ips) or (name,)
        leaf = self._ca.issue_cert(*identities, common_name=common_name, organization_name=organization)
        return CertPair(
            _write(leaf.cert_chain_pems[0], self.directory / f"{name}.crt"),
            _write(leaf.private_key_pem, self.directory / f"{name}.key", True),
        )


def write_service_account_keys(directory: Path) -> Path:
    """A private key that signs service-account tokens; kube-apiserver verifies them with its public half."""
    signer = trustme.CA().issue_cert(common_name="service-account-signer")
    return _write(signer.private_key_pem, directory / "sa.key", True)
