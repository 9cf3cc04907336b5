"""Runs one command and prints its peak RSS: `MAXRSS_KIB <n>` on stdout.

Usage: python3 -S rss_wrap.py PROGRAM [ARGS...]

The figure is getrusage(RUSAGE_CHILDREN).ru_maxrss after subprocess.run:
the peak of the only child this process has. Linux carries the parent's
resident size across fork + exec into the child's peak, so the figure is
at least this wrapper's own RSS; the wrapper imports as little as it can
(run it with -S) to keep that floor low. The command's stdout is dropped.
"""
import resource
import subprocess
import sys

r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print("MAXRSS_KIB %d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(r.returncode)
