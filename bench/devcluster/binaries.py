"""Where the control-plane binaries live: the version-keyed cache that `make binaries` fills.

The versions are pinned in `hack/versions.env`; `hack/build-binaries.sh` builds each component into
``<cache>/bin/<component>-<version>/`` and this module finds them there, using the same rules.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

# Component (the cache directory's prefix) -> its executables, as in hack/build-binaries.sh.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "kubernetes": ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
    "etcd": ("etcd",),
    "kwok": ("kwok",),
    "helm": ("helm",),
}
_VERSION_KEYS = {
    "kubernetes": "KUBERNETES_VERSION",
    "etcd": "ETCD_VERSION",
    "kwok": "KWOK_VERSION",
    "helm": "HELM_VERSION",
}


class BinariesMissing(RuntimeError):
    """A control-plane binary is not in the cache: `make binaries` builds it."""


def find_versions_file() -> Path:
    """hack/versions.env of the checkout this package runs from (or $GANGSOLVE_VERSIONS_ENV)."""
    override = os.environ.get("GANGSOLVE_VERSIONS_ENV")
    if override:
        return Path(override)
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "hack" / "versions.env"
        if candidate.is_file():
            return candidate
    raise BinariesMissing(
        "hack/versions.env not found above this package; run from a gangsolve checkout or set GANGSOLVE_VERSIONS_ENV"
    )


def read_versions(path: Path | None = None) -> dict[str, str]:
    """The KEY=VALUE pairs of versions.env (comments and blank lines ignored)."""
    path = path or find_versions_file()
    versions: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        parts = shlex.split(value)
        versions[key.strip()] = parts[0] if parts else ""
    return versions


def cache_dir() -> Path:
    """${GANGSOLVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gangsolve}, as in hack/build-binaries.sh."""
    if os.environ.get("GANGSOLVE_CACHE"):
        return Path(os.environ["GANGSOLVE_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gangsolve"


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every control-plane executable, plus the versions they were built at."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    etcd: Path
    kwok: Path
    helm: Path
    versions: dict[str, str]

    @classmethod
    def locate(cls, *, require: tuple[str, ...] = tuple(COMPONENTS)) -> Binaries:
        """Find the binaries in the cache; raise BinariesMissing naming `make binaries` if any is absent.

        `require` lists the components that must be present (default: all); the paths of the others are
        still filled in, whether or not they exist.
        """
        versions = read_versions()
        bin_dir = cache_dir() / "bin"
        paths: dict[str, Path] = {}
        missing: list[str] = []
        for component, executables in COMPONENTS.items():
            version = versions.get(_VERSION_KEYS[component])
            if not version:
                raise BinariesMissing(f"{_VERSION_KEYS[component]} is not set in {find_versions_file()}")
            for exe in executables:
                path = bin_dir / f"{component}-{version}" / exe
                paths[exe.replace("-", "_")] = path
                if component in require and not os.access(path, os.X_OK):
                    missing.append(f"{exe} {version} (expected at {path})")
        if missing:
            raise BinariesMissing(
                "control-plane binaries are missing: "
                + "; ".join(missing)
                + ". Build them with `make binaries` (runs hack/build-binaries.sh; a cold build of "
                "Kubernetes takes tens of minutes, later runs reuse the cache)."
            )
        return cls(versions=versions, **paths)
