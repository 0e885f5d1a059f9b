"""Image: the build image's inputs and content-hash tag (inputs), what the user says of it
(options), the CUDA 12 compiler layer (cuda_redist), the names wheelbuild gives its images and
volumes in Docker (names), and what the image stage asks of the engine (ports). No Docker here:
the engine builds and lists images."""
