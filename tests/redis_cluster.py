"""A 3-master Redis Cluster on loopback ports, for tests and for trying the cluster path by hand.

``python tests/redis_cluster.py`` starts one and prints its URL until interrupted; the test suite starts
its own through :func:`start` and stops it at the end.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field


def _free_ports(count: int) -> list[int]:
    """Ports free now whose cluster bus port (+10000) is free too."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10_000 > 65_535 or port in ports:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10_000))
            except OSError:
                continue
        ports.append(port)
    return ports


@dataclass
class Cluster:
    ports: list[int]
    directory: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}"

    def stop(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def available() -> bool:
    return bool(shutil.which("redis-server") and shutil.which("redis-cli"))


def start(masters: int = 3, timeout: float = 30.0) -> Cluster:
    """Start ``masters`` redis-servers in cluster mode (no persistence) and join them into one cluster."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        raise RuntimeError("redis-server and redis-cli are needed to start a Redis Cluster")
    cluster = Cluster(_free_ports(masters), tempfile.mkdtemp(prefix="threadkeeper-cluster-"))
    try:
        for port in cluster.ports:
            cluster.processes.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", f"nodes-{port}.conf", "--save", "", "--appendonly", "no",
                 "--dir", cluster.directory, "--cluster-node-timeout", "2000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout
        for port in cluster.ports:
            while subprocess.run([cli, "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start")
                time.sleep(0.05)
        created = subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in cluster.ports),
                                  "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True)
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-400:]} {created.stderr[-400:]}")
        while True:
            states = [subprocess.run([cli, "-p", str(p), "cluster", "info"], capture_output=True, text=True).stdout
                      for p in cluster.ports]
            if all("cluster_state:ok" in s for s in states):
                return cluster
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)
    except BaseException:
        cluster.stop()
        raise


if __name__ == "__main__":
    c = start()
    print(f"Redis Cluster of {len(c.ports)} masters at {c.url} (ports {', '.join(map(str, c.ports))}); Ctrl-C stops it")
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
    sys.exit(0)
