"""Runs one command and prints its peak RSS: `MAXRSS_KIB <n>` on stdout.

Usage: python3 -S rss_wrap.py [--keep-stdout] PROGRAM [ARGS...]

The figure is getrusage(RUSAGE_CHILDREN).ru_maxrss after subprocess.run:
the peak of the only child this process has. Linux carries the parent's
resident size across fork + exec into the child's peak, so the figure is
at least this wrapper's own RSS; the wrapper imports as little as it can
(run it with -S) to keep that floor low. The command's stdout is dropped,
or with --keep-stdout passed through before the figure's line.
"""
import resource
import subprocess
import sys

argv = sys.argv[1:]
keep = argv[:1] == ["--keep-stdout"]
if keep:
    argv = argv[1:]
sys.stdout.flush()
r = subprocess.run(argv, stdout=None if keep else subprocess.DEVNULL)
print("MAXRSS_KIB %d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
