"""Files gputop writes, made so another user cannot turn them against the user who runs it.

New files are created with O_EXCL|O_NOFOLLOW (mode 0600 unless asked, less what the umask
takes); an existing file is opened without following links and written only when it is a
regular file of ours with one link; a replaced file is written beside its target and renamed
over it, in a directory no other user can swap entries in. The kernel's protected_symlinks
is not relied upon.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import stat
from collections.abc import Iterator
from typing import BinaryIO

PRIVATE = 0o600  # the mode of every file gputop writes unless the user asks for another
CREATE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
EXISTING_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class WriteRefused(Exception):
    """A path gputop will not write; the message says why, in one line (without the path)."""


def create_new(path: str, flags: int = os.O_WRONLY, mode: int = PRIVATE,
               dir_fd: int | None = None) -> int:
    """A file descriptor of a file created now at `path` (never through a link)."""
    try:
        return os.open(path, flags | CREATE_FLAGS, mode, dir_fd=dir_fd)
    except FileExistsError:
        raise
    except OSError as exc:
        raise WriteRefused(_why(exc)) from None


def open_own(path: str, flags: int = os.O_WRONLY, dir_fd: int | None = None) -> int:
    """A file descriptor of the existing file at `path`: our regular file with one link."""
    try:
        fd = os.open(path, flags | EXISTING_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise WriteRefused(_why(exc)) from None
    try:
        check_own_file(os.fstat(fd))
    except WriteRefused:
        os.close(fd)
        raise
    return fd


def open_or_create(path: str, flags: int = os.O_WRONLY, mode: int = PRIVATE
                   ) -> tuple[int, bool]:
    """`path` created now, else opened as an existing file of ours; (fd, created)."""
    try:
        return create_new(path, flags, mode), True
    except FileExistsError:
        return open_own(path, flags), False


def check_own_file(info: os.stat_result) -> None:
    """Refuse anything but a regular file of ours with one link."""
    if not stat.S_ISREG(info.st_mode):
        raise WriteRefused("it is not a regular file")
    if info.st_uid != os.geteuid():
        raise WriteRefused(f"it belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})")
    if info.st_nlink != 1:
        raise WriteRefused(f"it has {info.st_nlink} hard links; gputop writes only a file "
                           "with one")


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stat results are of one file."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_directory_of(path: str) -> int:
    """A descriptor of the directory `path` is in, once it passes check_directory."""
    fd, where = _directory_of(path)
    try:
        check_directory(os.fstat(fd), where)
    except WriteRefused:
        os.close(fd)
        raise
    return fd


def _directory_of(path: str) -> tuple[int, str]:
    """A descriptor of the directory `path` is in, and that directory's name."""
    where = os.path.dirname(os.path.abspath(path))
    check_links_on_the_way(where)
    try:
        return os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), where
    except OSError as exc:
        raise WriteRefused(_why(exc)) from None


def check_links_on_the_way(where: str) -> None:
    """Refuse a directory path through a symbolic link of another user's (as the kernel's
    protected_symlinks would, were it on): they choose where it leads."""
    walked = "/"
    for part in where.strip("/").split("/"):
        walked = os.path.join(walked, part)
        try:
            info = os.lstat(walked)
        except OSError:
            return  # the open that follows names what is missing
        if stat.S_ISLNK(info.st_mode) and info.st_uid not in (os.geteuid(), 0):
            raise WriteRefused(f"{walked} is a symbolic link of uid {info.st_uid}, who "
                               "chooses where it leads")


def check_directory(info: os.stat_result, where: str) -> None:
    """Refuse a directory where another user could rename or plant entries at any time."""
    if info.st_uid not in (os.geteuid(), 0):
        raise WriteRefused(f"its directory {where} belongs to uid {info.st_uid}, who could "
                           "swap files in it")
    sticky = info.st_mode & stat.S_ISVTX
    others = info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP
                                             and not _private_group(info.st_gid))
    if others and not sticky:
        raise WriteRefused(f"its directory {where} is writable by other users and not "
                           "sticky: they could swap files in it")


def _private_group(gid: int) -> bool:
    """Whether `gid` is our own user-private group (named after us, no other members)."""
    try:
        me = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return gid == os.getegid() and group.gr_name == me and set(group.gr_mem) <= {me}


def check_replaceable(dir_fd: int, name: str) -> None:
    """Refuse to replace `name` (in `dir_fd`) when it is a link, not a file, or not ours."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise WriteRefused(_why(exc)) from None
    if stat.S_ISLNK(info.st_mode):
        raise WriteRefused("it is a symbolic link")
    if stat.S_ISDIR(info.st_mode):
        raise WriteRefused("it is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise WriteRefused("it is not a regular file")
    if info.st_uid != os.geteuid():
        raise WriteRefused(f"it belongs to uid {info.st_uid}, not to you (uid {os.geteuid()})")


@contextlib.contextmanager
def replacing(path: str, mode: int = PRIVATE) -> Iterator[BinaryIO]:
    """A new file to write that replaces `path` when the block ends without an error."""
    dir_fd, where = _directory_of(path)
    try:
        name = os.path.basename(path)
        check_directory(os.fstat(dir_fd), where)
        check_replaceable(dir_fd, name)
        with replacing_in(dir_fd, name, mode) as out:
            yield out
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def replacing_in(dir_fd: int, name: str, mode: int = PRIVATE) -> Iterator[BinaryIO]:
    """replacing() in a directory already checked: a temporary file renamed over `name`."""
    temp = f".gputop-{os.getpid()}-{os.urandom(4).hex()}.part"
    fd = create_new(temp, os.O_WRONLY, mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def _why(exc: OSError) -> str:
    """An OSError as a reason: a link opened without following says so."""
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
        return "it is a symbolic link"
    return exc.strerror or str(exc)
