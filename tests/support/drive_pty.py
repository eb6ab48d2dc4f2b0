#!/usr/bin/env python3
"""Drive an interactive Claude Code session through a pseudo-terminal.

Usage: drive_pty.py CLAUDE CWD DONE_FILE TIMEOUT_S PROMPT -- ARGS...
Runs CLAUDE ARGS in CWD under a pty with this process's environment, waits
for the prompt box, types PROMPT and Enter, then pumps the terminal until
DONE_FILE exists (the test's fake model writes it) or TIMEOUT_S passes, and
exits the session (/exit, confirming a "stop tasks" dialog). Prints a JSON
status line; the screen text goes to CWD/../tty.txt for debugging.
Used by tests/it/tasks.rs (tests need an interactive session, which -p is not).
"""
import json, os, pty, re, select, signal, sys, time

claude, cwd, done_file, timeout_s, prompt = sys.argv[1:6]
args = sys.argv[sys.argv.index("--") + 1:]
pid, fd = pty.fork()
if pid == 0:
    os.chdir(cwd)
    os.execv(claude, [claude] + args)

import fcntl, struct, termios
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
buf = bytearray()

def pump(secs):
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return False
            if not data:
                return False
            buf.extend(data)
            # Answer cursor-position and device-attribute queries.
            if b"\x1b[6n" in data:
                os.write(fd, b"\x1b[1;1R")
            if b"\x1b[c" in data:
                os.write(fd, b"\x1b[?62;c")
    return True

def text():
    t = re.sub(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]", b"", bytes(buf))
    t = re.sub(rb"\x1b[\]P_^][^\x07\x1b]*(\x07|\x1b\\)", b"", t)
    return t.decode("utf-8", "replace")

def wait_for(pred, secs):
    end = time.time() + secs
    while time.time() < end:
        if not pump(0.3):
            return False
        if pred():
            return True
    return False

status = {"ready": wait_for(lambda: "for shortcuts" in text() or "\u276f" in text(), 60)}
pump(2)
for ch in prompt:
    os.write(fd, ch.encode())
    pump(0.02)
pump(0.5)
os.write(fd, b"\r")
status["done"] = wait_for(lambda: os.path.exists(done_file), float(timeout_s))
pump(2)
for ch in "/exit":
    os.write(fd, ch.encode())
    pump(0.02)
pump(0.5)
os.write(fd, b"\r")
if wait_for(lambda: "Exit and stop tasks" in text(), 5):
    os.write(fd, b"\r")
wait_for(lambda: False, 10)
for _ in range(50):
    wpid, st = os.waitpid(pid, os.WNOHANG)
    if wpid:
        break
    time.sleep(0.1)
else:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    status["killed"] = True
open(os.path.join(os.path.dirname(os.path.abspath(cwd)), "tty.txt"), "w").write(text())
print(json.dumps(status))
