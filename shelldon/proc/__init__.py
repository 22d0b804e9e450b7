"""Processes and their confinement: one ``Child`` owner for every child process, the RLIMITs,
and the kernel sandbox (seccomp, a filesystem layer, a PID namespace, a cgroup per turn). The
worker imports these too: they hold no rule and no secret."""
