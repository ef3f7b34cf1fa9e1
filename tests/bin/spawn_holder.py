"""Start a ``sleep`` rank through engine.process from a short-lived thread, print its pid, wait.

The rank's death signal must follow the spawner thread (alive for the whole interpreter),
not this short-lived thread. The test then SIGKILLs us: the rank must die with us.

Usage: spawn_holder.py
"""

import threading
import time

from rankvisor.engine.process.rank_process import RankProcess

procs = []
t = threading.Thread(
    target=lambda: procs.append(RankProcess.spawn(["sleep", "600"], None, None, None))
)
t.start()
t.join()
print(procs[0].pid, flush=True)
while True:
    time.sleep(60)
