"""Processes and their confinement: one ``Child`` owner for every child process, the RLIMITs,
the kernel sandbox (seccomp, a filesystem layer, a PID namespace, a cgroup per turn) and opens
that follow no symlink (``beneath``). The worker imports these too: they hold no rule and no
secret."""
