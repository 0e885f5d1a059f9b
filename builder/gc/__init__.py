"""gc: what `wheelbuild gc` removes and what it keeps, decided purely (decisions, wheel_cache_use),
done to this machine's files (prune), and what it asks of the engine (ports)."""
