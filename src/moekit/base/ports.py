"""Ports of this host (effects: sockets): whether a coordinator could listen on one, and a free one to take.

The rendezvous rules themselves are pure (translate/rendezvous.py); what this host's ports hold now is asked here,
by the launch (run/), the host probes (preflight/) and the fabric check (worker/).
"""

from __future__ import annotations

import random
import socket

# Ports a local run picks from: below Linux's default ephemeral range (32768-60999), where the kernel gives
# outgoing connections their local ports, so a port picked here is not taken by a connection before it is bound.
PICK_RANGE = (20000, 32767)


def port_free(port: int) -> bool:
    """Whether a coordinator could listen on `port` of this host now (a closed job's TIME_WAIT is no conflict)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def free_port(rng: random.Random | None = None) -> int:
    """A port nothing on this host listens on, for one local run's coordinator (tried at random in PICK_RANGE,
    so runs started in the same second pick different ones; the kernel's choice when the range is full)."""
    rng = rng or random.Random()
    for _ in range(64):
        port = rng.randint(*PICK_RANGE)
        if port_free(port):
            return port
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]
