"""lab.cluster.free_port: the ports of the processes a test starts."""

from lab.cluster import free_port


def test_free_port_never_gives_a_port_twice() -> None:
    # Linux may hand out a port just released again: two replicas given one port started as one
    # (the second failed to bind while the first answered its readiness probe).
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < 65536 for p in ports)
