"""Index: the static PEP 503/691 index (writer and pages), publish (local, ssh+rsync, upload) and
serve. May import wheel/."""
