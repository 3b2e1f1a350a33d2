"""Programs that a memory limit must not stop: it bounds memory, not threads or address space.

Each prints a line ending in ``ok`` when it got what it asked for.
"""

from __future__ import annotations

#: 200 threads at once, each with its own stack reserved
THREADS = """
import threading
ready = threading.Barrier(201)
threads = [threading.Thread(target=ready.wait) for _ in range(200)]
for t in threads:
    t.start()
ready.wait()
for t in threads:
    t.join()
print("200 threads ok")
"""

#: 4 GiB of address space reserved and never touched
RESERVE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
PROT_NONE, MAP_PRIVATE, MAP_ANONYMOUS = 0, 0x02, 0x20
area = libc.mmap(None, 4 * 1024**3, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
assert area not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
print("4 GiB reserved ok")
"""
