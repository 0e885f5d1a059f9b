"""Progress: the console a build, calibrate and the nightly print their steps, status line and
warnings to."""
