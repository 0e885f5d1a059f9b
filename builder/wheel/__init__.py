"""Wheel: what a built wheel holds (archs in .nv_fatbin, METADATA, RECORD), its stamp, its symbol
versions and the import gate's verdicts (pure; imports only the shared leaves)."""
