"""Doctor: is this machine ready to build? Pure checks (checks) over facts gathered from the
network, the disk, the CA bundle and the GPU (facts) and from Docker (the engine's docker_facts)."""
