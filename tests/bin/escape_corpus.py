"""Print a corpus of hostile terminal input, one case per line, then exit 0.

Each line starts with ``case N:`` and then the bytes of one hostile sequence: what a rank can
print by accident (a progress bar, invalid UTF-8) or on purpose (a clipboard write).
"""

import sys

CORPUS = [
    b"\x1b]52;c;cm0gLXJmIH4=\x07",  # OSC 52: set the clipboard
    b"\x1b]2;title\x07",  # OSC 2: window title
    b"\x1b]0;title\x1b\\",  # OSC 0 with ST
    b"\x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\",  # OSC 8 hyperlink
    b"\x1b[2J\x1b[H",  # clear screen, home
    b"\x1b[6n",  # cursor position report: makes the terminal type into stdin
    b"\x1b[20t",  # window title report
    b"\x1bP+q544e\x1b\\",  # DCS request
    b"\x1b_APC\x1b\\",  # APC
    b"\x1b^PM\x1b\\",  # PM
    b"\x1bXSOS\x1b\\",  # SOS
    b"\x1bc",  # full reset
    b"\x1b(0",  # line-drawing character set
    b"\x9b2J",  # 8-bit CSI (as Latin-1)
    b"\xc2\x9b2J",  # 8-bit CSI (as UTF-8)
    b"\x1b]52;c;unterminated",  # an OSC that never ends
    b"\x1b",  # a lone ESC at the end of a line
    b"a\x00b\x07c\x08d\x7fe",  # NUL, BEL, BS, DEL
    b"\xff\xfe invalid utf-8 \xed\xa0\x80",  # invalid UTF-8, a lone surrogate
    b"frame 1\rframe 2\rframe 3",  # progress frames
    b"\x1b[31mred stays\x1b[0m",  # SGR colour: kept
]

out = sys.stdout.buffer
for i, raw in enumerate(CORPUS):
    out.write(b"case %d: " % i + raw + b"\n")
out.flush()
