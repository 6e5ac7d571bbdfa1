"""`python -m gangsolve run` against a control plane, as the live bench and the end-to-end tests start it: its
output in a log file, /readyz and /metrics on a free port."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from gangsolve.bench.devcluster.controlplane import free_port

REPO = Path(__file__).resolve().parents[2]


class GangsolveProcess:
    def __init__(
        self,
        kubeconfig: Path,
        scheduler_name: str,
        log_path: Path,
        *args: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`args` follow the ones every run gets; `env` is the whole environment (None: this process's)."""
        self.scheduler_name = scheduler_name
        self.log_path = log_path
        self.env = None if env is None else dict(env)
        self.port = free_port()
        self.args = [
            sys.executable,
            "-m",
            "gangsolve",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--scheduler-name",
            scheduler_name,
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            *args,
        ]
        self.proc: subprocess.Popen | None = None

    def start(self, wait_ready: bool = True, timeout: float = 120) -> GangsolveProcess:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=self.env)
        deadline = time.monotonic() + timeout
        while wait_ready and self.get("/readyz")[0] != 200:
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"gangsolve run not ready after {timeout:.0f}s:\n{self.log()[-4000:]}")
            time.sleep(0.05)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        """Raise, with the log's tail, if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"gangsolve run exited with {self.proc.returncode}:\n{self.log()[-4000:]}")

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of a GET on the metrics port; (0, "") when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, labels: str = "") -> float | None:
        """One sample of /metrics: `name`, with exactly `labels` (as written between the braces) if given."""
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(name + (("{" + labels + "}") if labels else " ")):
                return float(line.rsplit(" ", 1)[1])
        return None

    def metrics(self) -> dict[str, float]:
        """The unlabelled samples and histogram sums/counts of /metrics, by name."""
        out = {}
        for line in self.get("/metrics")[1].splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def terminate(self, timeout: float = 40) -> int:
        """SIGTERM, then wait for the exit: its code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, and SIGKILL if it has not exited within 30 s."""
        if self.alive():
            try:
                self.terminate(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
