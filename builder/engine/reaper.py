"""`python -m wheelbuild.engine.reaper OWNER RUN_ID`: started by a build in a session of its own; when the
build's process is gone (even by `kill -9`), removes the run's containers. See DockerEngine.start_reaper."""

from __future__ import annotations

import sys

from .docker_engine import reap_when_gone

if __name__ == "__main__":
    reap_when_gone(sys.argv[1], sys.argv[2])
