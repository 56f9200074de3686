"""Real multi-node parts on one machine, for tests: an sshd serving two loopback "hosts"
(127.0.0.1 and 127.0.0.2), and a one-machine Slurm cluster (munged, slurmctld, slurmd).

Not a test. Every daemon is started with its own throwaway config in a temporary folder and
found again by that folder or port (never by parentage), so ``stop`` can prove it left nothing.

Why an ``ssh`` wrapper on PATH: ssh reads its client config from the account's home directory
(the passwd entry, not $HOME), which a test must not touch. The wrapper adds ``-F <our config>``
(our key, no known_hosts) to the real ssh, for DeepSpeed's own ssh check and for pdsh alike.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

HOSTS = ("127.0.0.1", "127.0.0.2")
SSHD = "/usr/sbin/sshd"
MARK_ENV = "BLOOMPERF_TEST_CLUSTER"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(host: str, port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def marked_processes(marker: str) -> list[psutil.Process]:
    """Processes whose environment carries ``marker`` (``KEY=VALUE``), except this one."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            with open(f"/proc/{proc.pid}/environ", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    found.append(proc)
        except OSError:
            continue
    return found


def kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=10)


def running(processes: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in processes:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


class SshNodes:
    """An sshd on a free port of 127.0.0.1 and 127.0.0.2, root logs in with a throwaway key."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.bin = root / "bin"
        self.bin.mkdir()
        for key in ("host_key", "user_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True
            )
        (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
        (root / "authorized_keys").chmod(0o600)
        listen = "".join(f"ListenAddress {host}\n" for host in HOSTS)
        (root / "sshd_config").write_text(
            f"{listen}HostKey {root / 'host_key'}\nAuthorizedKeysFile {root / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            f"PidFile {root / 'sshd.pid'}\nLogLevel ERROR\n"
        )
        (root / "ssh_config").write_text(
            f"Host *\n  IdentityFile {root / 'user_key'}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  BatchMode yes\n"
            "  LogLevel ERROR\n"
        )
        wrapper = self.bin / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {root / "ssh_config"} "$@"\n')
        wrapper.chmod(0o755)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(exist_ok=True)  # a root sshd's privilege separation folder
        self.sshd = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(root / "sshd_config"), "-p", str(self.port)],
            env={"PATH": "/usr/sbin:/usr/bin:/bin", MARK_ENV: str(root)},
            stdout=open(root / "sshd.log", "wb"),  # noqa: SIM115 (closed with the process)
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for host in HOSTS:
            wait_listening(host, self.port)

    def env(self) -> dict[str, str]:
        """What a controller needs to reach these nodes: the ssh wrapper first on PATH."""
        return {"PATH": f"{self.bin}:{os.environ['PATH']}"}

    def hostfile(self, slots: int = 1) -> Path:
        path = self.root / "hostfile"
        path.write_text("".join(f"{host} slots={slots}\n" for host in HOSTS))
        return path

    def session_processes(self, host: str | None = None) -> list[psutil.Process]:
        """Everything started through this sshd (the remote side of every session)."""
        found = []
        for proc in psutil.process_iter():
            try:
                with open(f"/proc/{proc.pid}/environ", "rb") as f:
                    env = dict(
                        item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item
                    )
            except OSError:
                continue
            fields = env.get(b"SSH_CONNECTION", b"").decode().split()
            ours = len(fields) == 4 and fields[3] == str(self.port)
            if ours and (host is None or fields[2] == host):
                found.append(proc)
        return found

    def sshd_processes(self, host: str | None = None) -> list[psutil.Process]:
        """The listener and its per-connection children (found by our port)."""
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.exe() != SSHD:
                    continue
                for conn in proc.net_connections(kind="tcp"):
                    ours = bool(conn.laddr) and conn.laddr.port == self.port
                    serving = host is None or (conn.status != "LISTEN" and conn.laddr.ip == host)
                    if ours and serving:
                        found.append(proc)
                        break
            except psutil.Error:
                continue
        return found

    def drop_connections(self, host: str) -> int:
        """Kill the sshd processes serving ``host``'s sessions: their ssh connections drop."""
        serving = [p for p in self.sshd_processes(host) if p.pid != self.sshd.pid]
        kill_all(serving)
        return len(serving)

    def leftovers(self) -> list[psutil.Process]:
        return running(
            self.session_processes()
            + [p for p in self.sshd_processes() if p.pid != self.sshd.pid]
            + [p for p in marked_processes(f"{MARK_ENV}={self.root}") if p.pid != self.sshd.pid]
        )

    def stop(self) -> list[int]:
        """Stop sshd and everything it started; the pids that had to be killed."""
        left = self.leftovers()
        kill_all(left)
        self.sshd.kill()
        self.sshd.wait(timeout=10)
        kill_all(running(marked_processes(f"{MARK_ENV}={self.root}")))
        return [p.pid for p in left]


class SlurmCluster:
    """munged + slurmctld + two slurmd ("n1" on 127.0.0.1, "n2" on 127.0.0.2) on this machine.

    Clients find it through ``SLURM_CONF`` (``env()``); nothing outside ``root`` is written.
    """

    NODES = ("n1", "n2")

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            self._start_all(root)
        except BaseException:
            self.stop()  # what did start must not outlive a failed start
            raise

    def _start_all(self, root: Path) -> None:
        root.chmod(0o755)  # munged wants its socket's folder traversable by all
        for folder in ("state", "spool", "log"):
            (root / folder).mkdir()
        (root / "munge.key").write_bytes(os.urandom(1024))
        (root / "munge.key").chmod(0o600)
        self.daemon_env = {"PATH": "/usr/sbin:/usr/bin:/bin", MARK_ENV: str(root)}
        self._start(
            "/usr/sbin/munged",
            f"--socket={root / 'munge.socket'}",
            f"--key-file={root / 'munge.key'}",
            f"--pid-file={root / 'munged.pid'}",
            f"--log-file={root / 'log' / 'munged.log'}",
            f"--seed-file={root / 'munge.seed'}",
        )
        ctld_port, slurmd_ports = free_port(), [free_port() for _ in self.NODES]
        host = socket.gethostname()
        nodes = "".join(
            f"NodeName={name} NodeHostname={host} NodeAddr={addr} Port={port} CPUs=1 "
            "State=UNKNOWN\n"
            for name, addr, port in zip(self.NODES, HOSTS, slurmd_ports, strict=True)
        )
        (root / "slurm.conf").write_text(
            f"ClusterName=bloomperf\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={ctld_port}\n"
            f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={root / 'munge.socket'}\n"
            f"SlurmUser={getpass.getuser()}\nSlurmdUser={getpass.getuser()}\n"
            f"StateSaveLocation={root / 'state'}\nSlurmdSpoolDir={root / 'spool'}/%n\n"
            f"SlurmctldPidFile={root / 'slurmctld.pid'}\nSlurmdPidFile={root}/slurmd-%n.pid\n"
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}\n"
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/linear\n"
            "MpiDefault=none\nJobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\nReturnToService=2\n"
            f"{nodes}PartitionName=debug Nodes={','.join(self.NODES)} Default=YES "
            "MaxTime=INFINITE State=UP\n"
        )
        self.daemon_env["SLURM_CONF"] = str(root / "slurm.conf")
        self._start("/usr/sbin/slurmctld", "-c", "-i")
        for name in self.NODES:
            self._start("/usr/sbin/slurmd", "-N", name)
        self._wait_idle()

    def _start(self, *argv: str) -> None:
        """Daemons fork into the background; a failure to start is their exit status."""
        done = subprocess.run(
            argv,
            env=self.daemon_env,
            capture_output=True,
            text=True,
            timeout=30,
            start_new_session=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def _wait_idle(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                ["sinfo", "-h", "-o", "%T %D"],
                env={**os.environ, **self.env()},
                capture_output=True,
                text=True,
                timeout=30,
            )
            if done.stdout.split() == ["idle", str(len(self.NODES))]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm nodes not idle: {done.stdout} {done.stderr}")
            time.sleep(0.5)

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.root / "slurm.conf")}

    def hostfile(self) -> Path:
        path = self.root / "hostfile"
        path.write_text("".join(f"{name} slots=1\n" for name in self.NODES))
        return path

    def daemons(self) -> list[psutil.Process]:
        return running(marked_processes(f"{MARK_ENV}={self.root}"))

    def stop(self) -> None:
        """SIGTERM every daemon (slurmd ends its job steps), then SIGKILL what is left."""
        daemons = self.daemons()
        for proc in daemons:
            try:
                proc.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(daemons, timeout=15)
        kill_all(alive)
