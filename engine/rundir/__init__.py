"""The files of a run's directory that more than one room reads or writes.

``arrival``: the arrival index the output pump appends beside a rank's two logs and every
viewer merges them on (``arrival.idx``); ``atomic``: how a file is replaced so that a reader
sees the old one or the new one, never half of either (status.json, the registry's entries,
error.json, a function rank's return value, the bundle); ``regular_file``: how a file of a
run's directory is read, never following a link, never blocking on a FIFO, regular files
only and capped (a run dir is written by ranks and may be tampered with). A leaf: the
standard library only,
so the pump below the log-file room and the viewers above it share one format.
"""
