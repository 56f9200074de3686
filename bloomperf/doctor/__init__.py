"""What will not work on this machine and why: the checks behind `bloomperf doctor`."""
