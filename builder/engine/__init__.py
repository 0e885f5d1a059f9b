"""Engine: the one room with Docker in it. DockerEngine (docker_engine) holds the one docker
client: it builds images, runs an attempt (attempt_run, watched by watcher), the import gate's
container (gate_container), calibration's compiles (unit_compile) and the sccache-dist fleet
(dist_fleet), and removes what a run leaves (reaper). ports says what the pipeline asks of it."""
