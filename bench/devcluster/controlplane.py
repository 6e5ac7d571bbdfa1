"""A real, local Kubernetes control plane for tests and demos.

`ControlPlane` starts etcd, kube-apiserver, kube-controller-manager, optionally kube-scheduler, and kwok
(which fakes kubelets: it makes nodes Ready and bound pods Running) as child processes on loopback, with
free ports and a temporary directory holding certificates, data and logs. It writes an admin kubeconfig,
waits until every component is healthy, and tears everything down on `stop()` / leaving the `with` block /
interpreter exit. When a component fails, the error carries the tail of its log.

    with ControlPlane() as cp:
        cp.add_nodes(NodeSpec("n1", cpu="16", memory="64Gi", gpus=8))
        subprocess.run([cp.binaries.kubectl, "--kubeconfig", cp.kubeconfig, "get", "nodes"])
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from gangsolve.bench.devcluster import kwok as kwok_config
from gangsolve.bench.devcluster.binaries import Binaries
from gangsolve.bench.devcluster.fake_nodes import NodeSpec, schedulable
from gangsolve.bench.devcluster.pki import CertificateAuthority, CertPair, write_service_account_keys

LOOPBACK = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
# Pod IPs that kwok writes into pod status. Nothing ever connects to them: kwok runs no containers. (They
# cannot be loopback addresses: EndpointSlices reject those.)
POD_CIDR = "10.128.0.0/12"
# The InternalIP of every fake node. Loopback, so that anything asking a "kubelet" for logs or exec (the
# apiserver on `kubectl logs`) is refused on this machine instead of reaching out to some network.
NODE_IP = LOOPBACK
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LOG_TAIL_LINES = 40


class ControlPlaneError(RuntimeError):
    """A component did not start, did not become healthy, or died; the message has its log tail."""


class ApiError(RuntimeError):
    def __init__(self, status: int, reason: str, body: str) -> None:
        super().__init__(f"HTTP {status} {reason}: {body[:2000]}")
        self.status = status
        self.body = body


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class Component:
    """One child process: own process group, output to a log file, SIGTERM then SIGKILL on stop."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        log_dir: Path,
        cwd: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_dir / f"{name}.log"
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stopped = False  # stopped on purpose (not a crash)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        if self.alive():
            raise ControlPlaneError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        self.stopped = False
        with open(self.log_path, "ab") as log:
            log.write(f"\n==== gangsolve: start #{self.starts}: {' '.join(self.argv)}\n".encode())
            log.flush()
            # start_new_session: own process group, so a terminal's Ctrl-C reaches only us and teardown can
            # signal the whole group.
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )

    def stop(self, grace: float = 10.0) -> None:
        proc = self.process
        if proc is None:
            return
        self.stopped = True
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
            try:
                proc.wait(timeout=max(grace, 0.1))
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # Whatever the leader left in its group goes too.
        _signal_group(proc.pid, signal.SIGKILL)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def failure(self, what: str) -> ControlPlaneError:
        return ControlPlaneError(
            f"{self.name} {what}. Last {LOG_TAIL_LINES} lines of {self.log_path}:\n{self.log_tail()}"
        )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def tls_context(ca: Path | None, client: CertPair | None) -> ssl.SSLContext:
    if ca is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def _probe(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager (+ kube-scheduler) + kwok, on loopback.

    Use as a context manager, or call start()/stop(). Attributes once started: `kubeconfig` (admin,
    client-certificate auth), `server` (https URL), `token` (a bearer token with the same rights),
    `workdir` (certificates, etcd data, logs under logs/).
    """

    def __init__(
        self,
        *,
        scheduler: bool = True,
        defer_scheduler: bool = False,
        scheduler_config: Mapping[str, Any] | None = None,
        kwok: bool = True,
        node_leases: bool = True,
        binaries: Binaries | None = None,
        workdir: Path | str | None = None,
        keep_workdir: bool = False,
        startup_timeout: float = 90.0,
        job_pods_complete_after_ms: int | None = None,
        extra_apiserver_args: Sequence[str] = (),
        extra_scheduler_args: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
        audit_policy: Mapping[str, Any] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.with_scheduler = scheduler
        self.defer_scheduler = defer_scheduler  # the scheduler starts only on start_scheduler()
        # A KubeSchedulerConfiguration (clientConnection.kubeconfig and leaderElection are filled in).
        self.scheduler_config = scheduler_config
        self.with_kwok = kwok
        # False: kwok renews no node Leases, the node lifecycle controller is off (and so is the admission
        # plugin that taints new nodes not-ready until that controller says otherwise). At 5,000 nodes the
        # renewals alone (one per node every 10 s) take most of what two cores can write; a benchmark run is
        # over long before a node could go stale.
        self.node_leases = node_leases
        self._binaries = binaries
        self._workdir_arg = Path(workdir) if workdir is not None else None
        self.keep_workdir = keep_workdir
        self.startup_timeout = startup_timeout
        self.job_pods_complete_after_ms = job_pods_complete_after_ms
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.extra_scheduler_args = list(extra_scheduler_args)  # e.g. --feature-gates for alpha/beta plugins
        self.extra_controller_manager_args = list(extra_controller_manager_args)
        self.audit_policy = audit_policy  # an audit.k8s.io/v1 Policy: kube-apiserver logs requests by it
        self.audit_log: Path | None = None
        self._log = log or (lambda _msg: None)
        self.components: dict[str, Component] = {}
        self.workdir: Path | None = None
        self._owns_workdir = False
        self._started = False
        self._ctx: ssl.SSLContext | None = None

    # ---------------------------------------------------------------- lifecycle

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            required = ("kubernetes", "etcd") + (("kwok",) if self.with_kwok else ())
            self._binaries = Binaries.locate(require=required)
        return self._binaries

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Start every component and wait until each is healthy; on any failure (or Ctrl-C) tear down."""
        if self._started:
            raise ControlPlaneError("control plane already started")
        binaries = self.binaries  # fail before creating anything when binaries are missing
        t0 = time.monotonic()
        attempts = 3
        for attempt in range(1, attempts + 1):
            self._started = True
            atexit.register(self.stop)
            try:
                self._start_all(binaries)
                break
            except ControlPlaneError as e:
                # Free ports are picked before the components bind them; another cluster on the machine
                # may take one in between. Then start over on new ports.
                retry = "address already in use" in str(e) and attempt < attempts
                self.stop(failed=not retry)
                if not retry:
                    raise
                self._log(f"a port was taken meanwhile ({str(e).splitlines()[0]}); retrying on new ports")
                self.components = {}
            except BaseException:
                self.stop(failed=True)
                raise
        self._log(f"control plane ready in {time.monotonic() - t0:.1f}s; KUBECONFIG={self.kubeconfig}")
        return self

    def _start_all(self, binaries: Binaries) -> None:
        self._prepare(binaries)
        self._start_and_wait("etcd", self._etcd_ready)
        self._start_and_wait("kube-apiserver", self._apiserver_ready)
        self._start_and_wait("kube-controller-manager", self._component_ready("kube-controller-manager"))
        if self.with_scheduler and not self.defer_scheduler:
            self.start_scheduler()
        if self.with_kwok:
            self._start_kwok()
        self._wait_for_default_service_account("default")

    def stop(self, *, failed: bool = False) -> None:
        """Stop every component (reverse start order) and remove the temporary directory.

        The directory is kept when `keep_workdir` was asked for, or after a failed start (so its logs can
        be read).
        """
        if not self._started:
            return
        self._started = False
        atexit.unregister(self.stop)
        for comp in reversed(list(self.components.values())):
            comp.stop()
        if self.workdir is not None and self._owns_workdir and not self.keep_workdir and not failed:
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif self.workdir is not None:
            self._log(f"control plane files kept in {self.workdir}")

    def pids(self) -> dict[str, int]:
        """Process ids of the running components."""
        return {name: c.pid for name, c in self.components.items() if c.alive() and c.pid is not None}

    def check_alive(self) -> None:
        """Raise ControlPlaneError (with the log tail) if a component has died (not stopped on purpose)."""
        for comp in self.components.values():
            if comp.process is not None and not comp.stopped and not comp.alive():
                raise comp.failure(f"exited with code {comp.process.returncode}")

    def stop_apiserver(self, *, grace: float = 3.0) -> None:
        """Stop kube-apiserver only (the other components keep running and retry), e.g. for fault tests.

        SIGTERM, then SIGKILL after `grace` seconds: with clients still connected kube-apiserver would
        otherwise wait up to a minute for them. grace=0 kills it outright, like a crash.
        """
        self.components["kube-apiserver"].stop(grace=grace)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again, on the same port with the same flags, and wait until ready."""
        self._start_and_wait("kube-apiserver", self._apiserver_ready)

    def start_scheduler(self) -> None:
        """Start kube-scheduler (deferred with `defer_scheduler`, or stopped) and wait until it is healthy."""
        if "kube-scheduler" not in self.components:
            raise ControlPlaneError("this control plane runs without kube-scheduler")
        self._start_and_wait("kube-scheduler", self._component_ready("kube-scheduler"))

    def restart_apiserver(self, *, grace: float = 3.0) -> None:
        """stop_apiserver(grace=grace), then start_apiserver(): same port, same data (etcd keeps running)."""
        self.stop_apiserver(grace=grace)
        self.start_apiserver()

    # ---------------------------------------------------------------- set-up

    def _prepare(self, binaries: Binaries) -> None:
        if self._workdir_arg is not None:
            self.workdir = self._workdir_arg
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._owns_workdir = False
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="gangsolve-cp-"))
            self._owns_workdir = True
        wd = self.workdir
        pki_dir = wd / "pki"
        log_dir = wd / "logs"
        shutil.rmtree(wd / "etcd", ignore_errors=True)  # every start is a new cluster
        for d in (pki_dir, log_dir, wd / "etcd"):
            d.mkdir(parents=True, exist_ok=True)

        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.apiserver_port = free_port()
        self.kcm_port = free_port()
        self.scheduler_port = free_port()
        self.server = f"https://{LOOPBACK}:{self.apiserver_port}"

        ca = CertificateAuthority(pki_dir)
        self.ca = ca.pair
        serving = ca.issue(
            "apiserver",
            common_name="kube-apiserver",
            server_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            server_ips=(LOOPBACK, "10.96.0.1"),
        )
        self.admin_cert = ca.issue("admin", common_name="gangsolve-admin", organization="system:masters")
        kcm_cert = ca.issue("kube-controller-manager", common_name="system:kube-controller-manager")
        sched_cert = ca.issue("kube-scheduler", common_name="system:kube-scheduler")
        sa_key = write_service_account_keys(pki_dir)
        self.token = secrets.token_hex(24)
        tokens = pki_dir / "tokens.csv"
        tokens.write_text(f'{self.token},gangsolve-admin-token,gangsolve-admin-token,"system:masters"\n')
        tokens.chmod(0o600)

        self.kubeconfig = self._write_kubeconfig(wd / "kubeconfig", "gangsolve-admin", self.admin_cert)
        kcm_kubeconfig = self._write_kubeconfig(
            pki_dir / "kube-controller-manager.kubeconfig", "kube-controller-manager", kcm_cert
        )
        # kube-scheduler's identity (system:kube-scheduler): benchmarks run other schedulers as it too, so each
        # gets the same API Priority and Fairness flow and is counted under the same user.
        self.scheduler_kubeconfig = self._write_kubeconfig(
            pki_dir / "kube-scheduler.kubeconfig", "kube-scheduler", sched_cert
        )
        self._ctx = tls_context(ca.pair.cert, self.admin_cert)

        audit_args: list[str] = []
        if self.audit_policy is not None:
            policy = wd / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(dict(self.audit_policy)))
            self.audit_log = log_dir / "audit.log"
            audit_args = [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
            ]

        def comp(name: str, argv: list[str | os.PathLike[str]]) -> None:
            self.components[name] = Component(name, argv, log_dir, wd)

        peer = f"http://{LOOPBACK}:{self.etcd_peer_port}"
        client_url = f"http://{LOOPBACK}:{self.etcd_port}"
        comp(
            "etcd",
            [
                binaries.etcd,
                "--name=default",
                f"--data-dir={wd / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--initial-cluster-state=new",
                # A test cluster is thrown away afterwards: durability is not worth the fsync latency.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        comp(
            "kube-apiserver",
            [
                binaries.kube_apiserver,
                f"--etcd-servers={client_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.apiserver_port}",
                f"--cert-dir={wd / 'apiserver-certs'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.pair.cert}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={sa_key}",
                f"--service-account-signing-key-file={sa_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                # The `kubernetes` Service would point at 127.0.0.1, which endpoints may not hold; no pod here
                # needs to reach the apiserver through it.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                # Without the node lifecycle controller nobody would lift the not-ready taint this adds.
                *([] if self.node_leases else ["--disable-admission-plugins=TaintNodesByCondition"]),
                *audit_args,
                *self.extra_apiserver_args,
            ],
        )
        comp(
            "kube-controller-manager",
            [
                binaries.kube_controller_manager,
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={self.kcm_port}",
                f"--cert-dir={wd / 'kcm-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa_key}",
                f"--root-ca-file={ca.pair.cert}",
                f"--cluster-signing-cert-file={ca.pair.cert}",
                f"--cluster-signing-key-file={ca.pair.key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--controllers=*" if self.node_leases else "--controllers=*,-node-lifecycle-controller",
                "--profiling=false",
                *self.extra_controller_manager_args,
            ],
        )
        if self.with_scheduler:
            config_args: list[str] = []
            if self.scheduler_config is not None:
                config = {
                    **self.scheduler_config,
                    "clientConnection": {
                        **dict(self.scheduler_config.get("clientConnection") or {}),
                        "kubeconfig": str(self.scheduler_kubeconfig),
                    },
                    "leaderElection": {"leaderElect": False},
                }
                (wd / "kube-scheduler.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
                config_args = [f"--config={wd / 'kube-scheduler.yaml'}"]
            comp(
                "kube-scheduler",
                [
                    binaries.kube_scheduler,
                    *config_args,
                    f"--kubeconfig={self.scheduler_kubeconfig}",
                    f"--authentication-kubeconfig={self.scheduler_kubeconfig}",
                    f"--authorization-kubeconfig={self.scheduler_kubeconfig}",
                    f"--bind-address={LOOPBACK}",
                    f"--secure-port={self.scheduler_port}",
                    f"--cert-dir={wd / 'scheduler-certs'}",
                    "--leader-elect=false",
                    "--profiling=false",
                    *self.extra_scheduler_args,
                ],
            )
        if self.with_kwok:
            stages = kwok_config.write_config(
                wd / "kwok.yaml", job_pods_complete_after_ms=self.job_pods_complete_after_ms
            )
            key, value = kwok_config.MANAGED_ANNOTATION
            comp(
                "kwok",
                [
                    binaries.kwok,
                    f"--kubeconfig={self.kubeconfig}",
                    f"--config={stages}",
                    f"--manage-nodes-with-annotation-selector={key}={value}",
                    # kwok renews each node's Lease, which the node lifecycle controller watches.
                    f"--node-lease-duration-seconds={40 if self.node_leases else 0}",
                    f"--cidr={POD_CIDR}",
                    f"--node-ip={NODE_IP}",
                ],
            )

    def _write_kubeconfig(self, path: Path, user: str, cert: CertPair) -> Path:
        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gangsolve-dev",
                    "cluster": {"server": self.server, "certificate-authority-data": b64(self.ca.cert)},
                }
            ],
            "users": [
                {"name": user, "user": {"client-certificate-data": b64(cert.cert), "client-key-data": b64(cert.key)}}
            ],
            "contexts": [{"name": "gangsolve-dev", "context": {"cluster": "gangsolve-dev", "user": user}}],
            "current-context": "gangsolve-dev",
            "preferences": {},
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    # ---------------------------------------------------------------- health

    def _start_and_wait(self, name: str, ready: Callable[[], bool]) -> None:
        comp = self.components[name]
        t0 = time.monotonic()
        self._log(f"starting {name}")
        comp.start()
        deadline = t0 + self.startup_timeout
        while True:
            if not comp.alive():
                assert comp.process is not None
                raise comp.failure(f"exited with code {comp.process.returncode} while starting")
            if ready():
                self._log(f"{name} healthy after {time.monotonic() - t0:.1f}s (pid {comp.pid})")
                return
            if time.monotonic() > deadline:
                raise comp.failure(f"did not become healthy within {self.startup_timeout:.0f}s")
            time.sleep(0.2)

    def _etcd_ready(self) -> bool:
        return _probe(f"http://{LOOPBACK}:{self.etcd_port}/health")

    def _apiserver_ready(self) -> bool:
        return _probe(f"{self.server}/readyz", self._ctx)

    def _component_ready(self, name: str) -> Callable[[], bool]:
        insecure = tls_context(None, None)  # serving cert self-signed by the component itself
        return lambda: _probe(f"https://{LOOPBACK}:{self._secure_port(name)}/healthz", insecure)

    def _secure_port(self, name: str) -> int:
        return self.kcm_port if name == "kube-controller-manager" else self.scheduler_port

    def component_metrics(self, name: str) -> str:
        """The /metrics text of kube-scheduler or kube-controller-manager, read as admin (they authorize it
        through the API server); "" when the component does not answer."""
        ctx = tls_context(None, self.admin_cert)  # their serving certs are self-signed
        try:
            url = f"https://{LOOPBACK}:{self._secure_port(name)}/metrics"
            with urllib.request.urlopen(url, timeout=10, context=ctx) as resp:
                return str(resp.read().decode())
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return ""

    def _start_kwok(self) -> None:
        comp = self.components["kwok"]
        self._log("starting kwok")
        comp.start()
        # kwok has no health endpoint without its kubelet server; it is ready once it has looked at the
        # apiserver and is still running. Nodes made by add_nodes() prove it end to end.
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            if not comp.alive():
                assert comp.process is not None
                raise comp.failure(f"exited with code {comp.process.returncode} while starting")
            time.sleep(0.2)
        self._log(f"kwok running (pid {comp.pid})")

    def _wait_for_default_service_account(self, namespace: str, timeout: float | None = None) -> None:
        """Pods cannot be created in a namespace before its `default` ServiceAccount exists."""
        self.wait_for(
            lambda: self.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default") is not None,
            timeout=timeout or self.startup_timeout,
            what=f"the default ServiceAccount in namespace {namespace}",
            component="kube-controller-manager",
        )

    def wait_for(
        self,
        condition: Callable[[], bool],
        *,
        timeout: float = 60.0,
        what: str = "condition",
        component: str | None = None,
        interval: float = 0.2,
    ) -> None:
        """Poll `condition` until true; on timeout raise with the named component's log tail."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            if condition():
                return
            if time.monotonic() > deadline:
                comp = self.components.get(component or "")
                if comp is not None:
                    raise comp.failure(f"timed out after {timeout:.0f}s waiting for {what}")
                raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    # ---------------------------------------------------------------- a small REST client

    def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, content_type: str = "application/json"
    ) -> dict[str, Any]:
        """Call the apiserver as admin; `path` like /api/v1/nodes. Raises ApiError on HTTP errors."""
        if self._ctx is None:
            raise ControlPlaneError("control plane not started")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ctx) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, str(e.reason), e.read().decode(errors="replace")) from None
        return json.loads(payload) if payload else {}

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event logged so far (with an `audit_policy`): one JSON object per request."""
        if self.audit_log is None or not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]

    def get(self, path: str) -> dict[str, Any] | None:
        """GET, or None when the object does not exist (404)."""
        try:
            return self.request("GET", path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        except (urllib.error.URLError, OSError):
            return None

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this control plane."""
        return subprocess.run(
            [str(self.binaries.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    # ---------------------------------------------------------------- namespaces and nodes

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None, wait: bool = True) -> None:
        """Create a namespace and (by default) wait until pods can be created in it."""
        self.request(
            "POST",
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": dict(labels or {})},
            },
        )
        if wait:
            self._wait_for_default_service_account(name, timeout=60)

    def delete_namespace(self, name: str) -> None:
        try:
            self.request("DELETE", f"/api/v1/namespaces/{name}")
        except ApiError as e:
            if e.status != 404:
                raise

    def add_nodes(
        self, nodes: Iterable[NodeSpec | str], *, wait: bool = True, timeout: float = 60.0, threads: int = 8
    ) -> list[str]:
        """Create fake nodes managed by kwok (`threads` requests at a time); by default wait until each is Ready
        and schedulable."""
        if not self.with_kwok:
            raise ControlPlaneError("this control plane runs without kwok: nobody would make nodes Ready")
        specs = [NodeSpec(node) if isinstance(node, str) else node for node in nodes]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda spec: self.request("POST", "/api/v1/nodes", spec.manifest()), specs))
        names = [spec.name for spec in specs]
        if wait:
            self.wait_for(
                lambda: self._all_schedulable(names),
                timeout=timeout,
                what=f"{len(names)} nodes ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}) to become Ready",
                component="kwok",
                interval=0.2 if len(names) < 100 else 1.0,
            )
        return names

    def _all_schedulable(self, names: Sequence[str]) -> bool:
        if len(names) <= 10:
            return all(self.node_schedulable(n) for n in names)
        listing = self.request("GET", "/api/v1/nodes")  # one list, not a request per node
        schedulable = {n["metadata"]["name"] for n in listing["items"] if schedulable(n)}
        return schedulable.issuperset(names)

    def delete_node(self, name: str) -> None:
        try:
            self.request("DELETE", f"/api/v1/nodes/{name}")
        except ApiError as e:
            if e.status != 404:
                raise

    def node_schedulable(self, name: str) -> bool:
        """Ready=True, and the node lifecycle controller has lifted its not-ready/unreachable taints."""
        node = self.get(f"/api/v1/nodes/{name}")
        return node is not None and schedulable(node)
