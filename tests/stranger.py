#!/usr/bin/env python3
"""A local process without the job key (issue 50): it watches /proc/net/tcp for listening sockets
that appear after it starts, and holds K silent connections to each while it listens
(connecting again whenever one is closed), as a stranger who wants to stall or break a job's
set-up and its later connections would. It never sends a byte.

    stranger.py K SECONDS [OUT]

Once it has noted the listeners that exist already (and leaves alone), it creates OUT.ready. Runs
for SECONDS or until SIGTERM, then writes to OUT (or stdout) how many listeners it found and how
many connections it opened in all. Meant to run in a network namespace of its own together
with the job it targets (tests/mp_strangers.sh), so that no other program's listener is touched."""
import resource, signal, socket, sys, time


def listeners():
    found = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A":  # LISTEN
                        found.add((path.endswith("6"), int(parts[1].split(":")[1], 16)))
        except OSError:
            pass
    return found


class Done(Exception):
    pass


def stop(*_):
    raise Done()


def main():
    k, seconds = int(sys.argv[1]), float(sys.argv[2])
    out = open(sys.argv[3], "w") if len(sys.argv) > 3 else sys.stdout
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGTERM, stop)
    before = listeners()
    if len(sys.argv) > 3:  # the listeners that exist now are left alone: the test may start its job
        open(sys.argv[3] + ".ready", "w").close()
    targets = {}  # (v6, port) -> its sockets
    found = opened = 0
    end = time.time() + seconds
    try:
        while time.time() < end:
            current = listeners()
            for t in current - before:
                if t not in targets:
                    targets[t] = []
                    found += 1
            for t in [t for t in targets if t not in current]:  # no longer listening: leave it
                for s in targets.pop(t):
                    s.close()
            for (v6, port), socks in targets.items():
                alive = []
                for s in socks:  # a closed one reads as end of file: connect again
                    try:
                        if s.recv(1, socket.MSG_DONTWAIT) == b"":
                            s.close()
                            continue
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        s.close()
                        continue
                    alive.append(s)
                while len(alive) < k:
                    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
                    s.setblocking(False)
                    try:
                        s.connect(("::1" if v6 else "127.0.0.1", port))
                    except BlockingIOError:
                        pass
                    except OSError:
                        s.close()
                        break
                    alive.append(s)
                    opened += 1
                socks[:] = alive
            time.sleep(0.002)
    except Done:
        pass
    print(f"stranger: {found} listeners, {opened} connections opened", file=out)
    out.flush()


if __name__ == "__main__":
    main()
