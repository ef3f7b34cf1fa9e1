"""Start a child in our process group and a grandchild in a new session, then sleep.

Writes "child_pid escaped_pid" to PIDFILE once both run. The escaped one left the group
with setsid, as a daemonising helper would: only a descendant walk can find it.

Usage: spawn_tree.py PIDFILE
"""

import os
import subprocess
import sys
import time

child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
escaped = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{child.pid} {escaped.pid}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(60)
