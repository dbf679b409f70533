"""A periodic POSIX timer on CLOCK_MONOTONIC that sends a signal to one thread (Linux's
SIGEV_THREAD_ID), through ctypes: the stack sampler's trigger. Every failure is an OSError."""

from __future__ import annotations

import ctypes
import ctypes.util

CLOCK_MONOTONIC = 1
SIGEV_THREAD_ID = 4  # Linux: deliver to the thread whose TID the sigevent names


class _SigEvent(ctypes.Structure):
    """struct sigevent (64 bytes on Linux): sigval, signo, notify, then a union whose first
    int is the target thread's TID."""

    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("tid", ctypes.c_int), ("pad", ctypes.c_int * 11)]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("interval", _TimeSpec), ("value", _TimeSpec)]


_libc: ctypes.CDLL | None = None


def _timer_library() -> ctypes.CDLL:
    """The C library with timer_create (glibc 2.34+ itself, else librt), its calls typed."""
    global _libc
    if _libc is not None:
        return _libc
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.timer_create  # noqa: B018  (an AttributeError where librt holds it)
    except (OSError, AttributeError):
        name = ctypes.util.find_library("rt")
        if name is None:
            raise OSError("no C library with timer_create") from None
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            lib.timer_create  # noqa: B018
        except AttributeError:
            raise OSError(f"{name} has no timer_create") from None
    lib.timer_create.argtypes = [ctypes.c_int, ctypes.POINTER(_SigEvent),
                                 ctypes.POINTER(ctypes.c_void_p)]
    lib.timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_ITimerSpec),
                                  ctypes.c_void_p]
    lib.timer_delete.argtypes = [ctypes.c_void_p]
    for call in (lib.timer_create, lib.timer_settime, lib.timer_delete):
        call.restype = ctypes.c_int
    _libc = lib
    return lib


class ThreadTimer:
    """A periodic timer sending `signo` to the thread with native id `tid`, armed at once."""

    def __init__(self, signo: int, tid: int, period_s: float) -> None:
        self._lib = _timer_library()
        event = _SigEvent(None, signo, SIGEV_THREAD_ID, tid)
        handle = ctypes.c_void_p()
        if self._lib.timer_create(CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(handle)):
            _raise("timer_create")
        self._handle: ctypes.c_void_p | None = handle
        self.period_s = 0.0
        try:
            self.set_period(period_s)
        except OSError:
            self.delete()
            raise

    def set_period(self, period_s: float) -> None:
        """Fire every `period_s` from now on (the first time `period_s` from now)."""
        handle = self._handle
        if handle is None:
            raise OSError("the timer is deleted")
        ns = max(1, round(period_s * 1e9))
        every = _TimeSpec(ns // 1_000_000_000, ns % 1_000_000_000)
        if self._lib.timer_settime(handle, 0, ctypes.byref(_ITimerSpec(every, every)), None):
            _raise("timer_settime")
        self.period_s = period_s

    def delete(self) -> None:
        """Disarm and free the timer; a second call does nothing."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.timer_delete(handle)

    @property
    def armed(self) -> bool:
        """Whether the timer still exists."""
        return self._handle is not None


def _raise(call: str) -> None:
    errno = ctypes.get_errno()
    raise OSError(errno, f"{call} failed")
