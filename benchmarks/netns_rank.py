#!/usr/bin/env python3
"""netns_rank.py: run one Open MPI rank inside a netcluster.sh host namespace.

    mpirun --allow-run-as-root --oversubscribe --bind-to none -np 8 --mca pml ob1 \\
        --mca btl tcp,self --mca btl_tcp_if_include 198.18.ID.0/24 \\
        python3 benchmarks/netns_rank.py --cluster ID --ranks-per-host L -- PROG ARGS...

mpirun runs in the root network namespace and starts this wrapper there for every rank. The wrapper
starts PROG in the namespace of the rank's fake host (gsnc<ID>-h<rank / L>, rank from
OMPI_COMM_WORLD_RANK) with `ip netns exec`, so the MPI data path (btl tcp) uses that host's shaped
veth.

The catch: Open MPI 4.1 with PMIx 4 reaches its PMIx server (inside mpirun) over TCP on 127.0.0.1
(PMIX_SERVER_URI* = "...;tcp4://127.0.0.1:PORT"), and 127.0.0.1 inside a network namespace is that
namespace's own loopback. So the wrapper relays the connection: in the host namespace a relay
process listens on 127.0.0.1:<free port> and forwards every connection over a filesystem unix socket
(those work across network namespaces; the namespaces share /tmp) to the wrapper, which connects to
the real server on the root namespace's 127.0.0.1:PORT. The rank's PMIX_SERVER_URI* variables are
rewritten to the relay's port. Only PMIx control traffic takes this path (a few kB per job).

Exit status: the rank's (128 + signal when it was killed by one); 1 when the wrapper itself fails
(message on stderr). SIGTERM/SIGINT/SIGHUP are passed on to the rank.
Standard library only.
"""

import argparse
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

PROG = "netns_rank.py"
URI_VARS = ("PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI2",
            "PMIX_SERVER_URI21", "PMIX_SERVER_URI")
URI_RE = re.compile(r"tcp4://127\.0\.0\.1:(\d+)")


def die(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def pump(a, b):
    """Copies bytes a -> b until EOF, then half-closes b."""
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def splice(a, b):
    """Relays both directions between sockets a and b; closes both at the end."""
    t = threading.Thread(target=pump, args=(b, a), daemon=True)
    t.start()
    pump(a, b)
    t.join()
    a.close()
    b.close()


def serve(listener, connect):
    """Accept loop: every accepted connection is spliced to a fresh connect()."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            peer = connect()
        except OSError as e:
            print(f"{PROG}: relay cannot connect: {e}", file=sys.stderr, flush=True)
            conn.close()
            continue
        threading.Thread(target=splice, args=(conn, peer), daemon=True).start()


def ns_side(unix_path):
    """In the host namespace: listen on 127.0.0.1:0, print the port, relay to the unix socket.
    Ends when stdin (a pipe from the wrapper) closes, i.e. when the wrapper is gone."""
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(16)

    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(unix_path)
        return s

    threading.Thread(target=serve, args=(lst, connect), daemon=True).start()
    print(lst.getsockname()[1], flush=True)
    while True:  # wait for EOF on stdin
        r, _, _ = select.select([sys.stdin], [], [])
        if not os.read(sys.stdin.fileno(), 4096):
            break
    os._exit(0)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--ns-side":
        ns_side(sys.argv[2])
        return 0
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", required=True, type=int, help="netcluster.sh cluster id")
    ap.add_argument("--ranks-per-host", type=int, default=1, help="ranks per fake host (L); rank r runs on host r / L")
    ap.add_argument("--prefix", default="gsnc", help="namespace prefix used by netcluster.sh (default gsnc)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        die("no program given (usage: netns_rank.py --cluster ID [--ranks-per-host L] -- PROG ARGS)")
    if args.ranks_per_host < 1:
        die("--ranks-per-host must be >= 1")
    rank_s = os.environ.get("OMPI_COMM_WORLD_RANK")
    if rank_s is None or not rank_s.isdigit():
        die("OMPI_COMM_WORLD_RANK is not set: start this wrapper with Open MPI's mpirun")
    rank = int(rank_s)
    host = rank // args.ranks_per_host
    ns = f"{args.prefix}{args.cluster}-h{host}"
    if not os.path.exists(f"/var/run/netns/{ns}"):
        die(f"rank {rank}: network namespace {ns} does not exist (cluster {args.cluster} has fewer hosts "
            f"than {host + 1}? -np must be hosts x ranks-per-host)")

    env = dict(os.environ)
    port = None
    for v in URI_VARS:
        m = URI_RE.search(env.get(v, ""))
        if m:
            port = int(m.group(1))
            break
    if port is None:
        die("no PMIx server URI of the form tcp4://127.0.0.1:PORT in PMIX_SERVER_URI*: "
            "this wrapper knows Open MPI 4.1 with PMIx 3/4 only")

    tmp = tempfile.mkdtemp(prefix=f"gsync-ompi-relay-r{rank}-")
    unix_path = os.path.join(tmp, "pmix.sock")
    relay = child = None
    try:
        # Root namespace side: unix socket -> the real PMIx server.
        ulst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ulst.bind(unix_path)
        ulst.listen(16)
        threading.Thread(target=serve, args=(ulst, lambda: socket.create_connection(("127.0.0.1", port))),
                         daemon=True).start()
        # Host namespace side.
        relay = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, os.path.abspath(__file__),
                                  "--ns-side", unix_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = relay.stdout.readline().strip()
        if not line.isdigit():
            die(f"rank {rank}: the relay in {ns} did not start (got {line!r})")
        ns_port = int(line)
        for v in URI_VARS:
            if v in env:
                env[v] = URI_RE.sub(f"tcp4://127.0.0.1:{ns_port}", env[v])

        child = subprocess.Popen(["ip", "netns", "exec", ns] + cmd, env=env)

        def forward(sig, _frame):
            if child.poll() is None:
                child.send_signal(sig)

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, forward)
        rc = child.wait()
        return 128 - rc if rc < 0 else rc
    except OSError as e:
        die(f"rank {rank}: {e}")
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        if relay is not None:
            try:
                relay.stdin.close()
            except OSError:
                pass
            try:
                relay.wait(timeout=5)
            except subprocess.TimeoutExpired:
                relay.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
