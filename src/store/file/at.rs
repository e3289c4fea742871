//! File operations relative to directory file descriptors.
//!
//! The lock directory is opened once without following a symlink, and each of its
//! subdirectories is opened from that descriptor the same way. Every create, open,
//! rename, unlink and listing then names a single component relative to one of these
//! descriptors, so whatever is swapped in under the lock directory (a subdirectory
//! replaced by a symlink to somewhere else, at any moment) can never make tasklock read,
//! write or delete outside it. Files are opened non-blocking and their type is checked
//! before they are used, so a FIFO, socket or device planted in the store never blocks a
//! command.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// An open directory of the store, with the path it was opened at (for messages).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    /// Whether the lock directory is group-shared (see [`is_shared_mode`]): what is
    /// created below it is then 0660 / 2770, else 0600 / 0700.
    shared: bool,
}

/// Mode of every file tasklock creates in a private lock directory.
pub const PRIVATE_FILE: u32 = 0o600;
/// Mode of every directory tasklock creates in a private lock directory.
pub const PRIVATE_DIR: u32 = 0o700;
/// Mode of every file tasklock creates in a group-shared lock directory.
pub const SHARED_FILE: u32 = 0o660;
/// Mode of every directory in a group-shared lock directory (setgid: new entries get
/// the directory's group).
pub const SHARED_DIR: u32 = 0o2770;

/// A lock directory is group-shared when it has the setgid bit and group write: only its
/// owner (or root) can set those, so no other user can switch a directory to shared by
/// planting a file.
pub fn is_shared_mode(mode: u32) -> bool {
    let bits = raw_mode(libc::S_ISGID | libc::S_IWGRP);
    mode & bits == bits
}

/// A mode as the system's type holds it (`u32` on Linux, `u16` on macOS) widened.
#[allow(clippy::useless_conversion)]
pub fn raw_mode(m: libc::mode_t) -> u32 {
    u32::from(m)
}

/// Permission bits as the system's mode type.
#[allow(clippy::unnecessary_cast)]
pub fn mode(bits: u32) -> Mode {
    Mode::from_raw_mode((bits & 0o7777) as libc::mode_t)
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// What a file found where a directory of the store belongs is called in errors.
pub fn not_a_directory() -> io::Error {
    io::Error::other("it is not a directory (a symlink or file was put there); remove it")
}

/// What a FIFO, socket or device found where a file of the store belongs is called.
pub fn not_a_regular_file() -> io::Error {
    io::Error::other("it is not a regular file (a FIFO, socket or device was put there); remove it")
}

fn dir_error(e: Errno) -> io::Error {
    if e == Errno::LOOP || e == Errno::NOTDIR {
        not_a_directory()
    } else {
        e.into()
    }
}

impl Dir {
    /// Open the directory at `path`; a symlink in its place is refused.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = rustix::fs::open(path, DIR_FLAGS, Mode::empty()).map_err(dir_error)?;
        Self::from_fd(fd, path)
    }

    fn from_fd(fd: OwnedFd, path: &Path) -> io::Result<Dir> {
        let shared = is_shared_mode(raw_mode(rustix::fs::fstat(&fd)?.st_mode));
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
            shared,
        })
    }

    /// Open the lock directory itself. Its path is the caller's choice (`--dir`,
    /// `TASKLOCK_DIR`, a `.locks` found by discovery), so a symlink there is followed,
    /// once: everything below is reached through this descriptor and never follows one.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let flags = DIR_FLAGS.difference(OFlags::NOFOLLOW);
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(dir_error)?;
        Self::from_fd(fd, path)
    }

    /// Is this directory part of a group-shared lock directory?
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The mode files created here get.
    pub fn file_mode(&self) -> u32 {
        if self.shared {
            SHARED_FILE
        } else {
            PRIVATE_FILE
        }
    }

    /// The mode directories created here get.
    pub fn dir_mode(&self) -> u32 {
        if self.shared { SHARED_DIR } else { PRIVATE_DIR }
    }

    /// Give what was just created here its full mode: in a shared directory the umask
    /// may have taken the group's bits away (a private mode only loses bits to a umask,
    /// never gains any, so there is nothing to do there).
    fn fix_mode(&self, fd: BorrowedFd<'_>, want: u32) -> io::Result<()> {
        if !self.shared {
            return Ok(());
        }
        let st = rustix::fs::fstat(fd)?;
        if raw_mode(st.st_mode) & 0o7777 != want {
            rustix::fs::fchmod(fd, mode(want))?;
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.path.join(name.as_ref())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The subdirectory `name`, made when missing and `create`; `None` when missing
    /// otherwise. A symlink or file in its place is an error, never followed.
    pub fn sub(&self, name: &str, create: bool) -> io::Result<Option<Dir>> {
        let path = self.join(name);
        let shared = self.shared;
        match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => return Ok(Some(Dir { fd, path, shared })),
            Err(Errno::NOENT) if create => {}
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(dir_error(e)),
        }
        let made = match rustix::fs::mkdirat(&self.fd, name, mode(self.dir_mode())) {
            // Made by us or by another process meanwhile: either way it is opened
            // without following a symlink, so what was made is checked, not assumed.
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(e) => return Err(e.into()),
        };
        let fd = rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()).map_err(dir_error)?;
        if made {
            self.fix_mode(fd.as_fd(), self.dir_mode())?;
        }
        Ok(Some(Dir { fd, path, shared }))
    }

    /// A second descriptor of this directory with its own open file description (for a
    /// `flock` that ends when it is closed).
    pub fn reopen(&self) -> io::Result<File> {
        let fd = rustix::fs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())?;
        Ok(File::from(fd))
    }

    /// Open `name` for reading; never follows a symlink, never blocks on a FIFO. The
    /// caller checks the type.
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty())?;
        Ok(File::from(fd))
    }

    /// Open `name` for reading when it is a regular file: `None` when absent, an error
    /// for a symlink, FIFO, socket or device.
    pub fn open_regular(&self, name: &str) -> io::Result<Option<File>> {
        let file = match self.open_read(name) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        regular(file).map(Some)
    }

    /// Create `name`, which must not exist (a symlink there counts as existing), with
    /// this directory's file mode.
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = self.file_mode();
        let fd = rustix::fs::openat(&self.fd, name, flags, self::mode(mode))?;
        self.fix_mode(fd.as_fd(), mode)?;
        Ok(File::from(fd))
    }

    /// Open `name` for reading and writing, creating it when missing; only a regular
    /// file is accepted.
    pub fn open_rw(&self, name: &str, append: bool) -> io::Result<File> {
        self.open_rw_stat(name, append).map(|(file, _)| file)
    }

    /// As [`Dir::open_rw`], with the file's metadata as it was checked (the size as
    /// opened; the device and inode, which an open file keeps).
    pub fn open_rw_stat(&self, name: &str, append: bool) -> io::Result<(File, std::fs::Metadata)> {
        let mut flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        if append {
            flags |= OFlags::APPEND;
        }
        // Opened as it is when it exists (the common case; an existing file's mode is
        // left alone), else created with this directory's mode.
        let mode = self.file_mode();
        let fd = loop {
            match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
                Err(Errno::NOENT) => {}
                r => break r?,
            }
            let create = flags | OFlags::CREATE | OFlags::EXCL;
            match rustix::fs::openat(&self.fd, name, create, self::mode(mode)) {
                Ok(fd) => {
                    self.fix_mode(fd.as_fd(), mode)?;
                    break fd;
                }
                // Made by another process meanwhile: open that one.
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let file = File::from(fd);
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(not_a_regular_file());
        }
        // Back to blocking: a regular file never blocks on O_NONBLOCK anyway, and the
        // flag must not leak into what std expects of the file. F_SETFL sets only the
        // status flags (append, non-blocking, and ones never asked for here), so the flags
        // opened with, less O_NONBLOCK, need not be asked for with F_GETFL first.
        rustix::fs::fcntl_setfl(&file, flags & OFlags::APPEND)?;
        Ok((file, meta))
    }

    /// `stat` of `name` itself (a symlink is not followed).
    pub fn stat(&self, name: &str) -> io::Result<rustix::fs::Stat> {
        Ok(rustix::fs::statat(
            &self.fd,
            name,
            AtFlags::SYMLINK_NOFOLLOW,
        )?)
    }

    /// Remove the file (or symlink, FIFO…) `name`; absent already is fine.
    pub fn unlink(&self, name: &str) -> io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Remove the empty directory `name`.
    pub fn rmdir(&self, name: &str) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR)?)
    }

    /// Rename `from` in this directory to `to` in `dest`, replacing what is there.
    pub fn rename(&self, from: &str, dest: &Dir, to: &str) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &dest.fd, to)?)
    }

    /// Put the file `from` here in place of `to` in `dest`, atomically: a reader opening
    /// `to` finds the old file or the new one, never neither. Returns the old file,
    /// removed but still open (see [`Dir::unlink_open`]).
    ///
    /// When `to` exists, the two are exchanged and the old one, now at `from`, removed.
    /// A rename over it would do the same in one call, but ext4 writes the new file's
    /// blocks out at once when a rename replaces a file (its `auto_da_alloc`), and each
    /// such file later freed costs a discard: measured here, 50 µs of CPU and 110 µs of
    /// wall time per replace against 13 and 17 with the exchange, all of it under the
    /// guard. Killed between the two calls, the old file is left in `tmp/`, which the
    /// next command to take the guard sweeps.
    pub fn replace(&self, from: &str, dest: &Dir, to: &str) -> io::Result<Option<File>> {
        match rustix::fs::renameat_with(&self.fd, from, &dest.fd, to, RenameFlags::EXCHANGE) {
            Ok(()) => match self.unlink_open(from) {
                Ok(old) => Ok(old),
                // A directory was in place of `to` (a rename over it fails): back as it
                // was, and the rename's error.
                Err(e) if e.raw_os_error() == Some(Errno::ISDIR.raw_os_error()) => {
                    rustix::fs::renameat_with(&self.fd, from, &dest.fd, to, RenameFlags::EXCHANGE)?;
                    Err(e)
                }
                Err(e) => Err(e),
            },
            // Nothing at `to` yet, or a file system that cannot exchange.
            Err(Errno::NOENT) | Err(Errno::INVAL) | Err(Errno::NOSYS) => {
                self.rename(from, dest, to).map(|()| None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Rename `from` here to `to` in `dest`, over what is there; returns the file it
    /// replaced, removed but still open (see [`Dir::unlink_open`]).
    pub fn rename_over(&self, from: &str, dest: &Dir, to: &str) -> io::Result<Option<File>> {
        let old = dest.open_regular(to).ok().flatten();
        self.rename(from, dest, to)?;
        Ok(old)
    }

    /// Remove the file `name` (absent already is fine), and return it still open when it
    /// was a regular file. The blocks of a removed file are freed when its last
    /// descriptor closes, and freeing them can wait for the disk (a discard, on a file
    /// system mounted with `discard`); the guard's holder closes them after letting the
    /// guard go, so nobody waits for that behind it.
    pub fn unlink_open(&self, name: &str) -> io::Result<Option<File>> {
        let open = self.open_regular(name).ok().flatten();
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(open),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Rename `from` here to `to` in `dest`; fails with `AlreadyExists` if `to` exists.
    pub fn rename_noreplace(&self, from: &str, dest: &Dir, to: &str) -> io::Result<()> {
        match rustix::fs::renameat_with(&self.fd, from, &dest.fd, to, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(()),
            // File systems without RENAME_NOREPLACE: `link` fails if the name is taken.
            Err(Errno::INVAL) | Err(Errno::NOSYS) => {
                rustix::fs::linkat(&self.fd, from, &dest.fd, to, AtFlags::empty())?;
                let _ = self.unlink(from);
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The names in this directory (without `.` and `..`), with whether each is a
    /// directory (as the directory listing says; unknown counts as not).
    pub fn entries(&self) -> io::Result<Vec<(String, bool)>> {
        let mut out = Vec::new();
        // A descriptor of its own for the listing (its own position), opened with the
        // flags this one has: what `Dir::read_from` does after asking them with F_GETFL.
        let fd = rustix::fs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())?;
        for entry in rustix::fs::Dir::new(fd)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                // Every name the store writes is ASCII; others are not ours.
                continue;
            };
            out.push((
                name.to_string(),
                entry.file_type() == rustix::fs::FileType::Directory,
            ));
        }
        Ok(out)
    }
}

/// `file` when it is a regular file, else an error saying what it is.
pub fn regular(file: File) -> io::Result<File> {
    let meta = file.metadata()?;
    if meta.is_file() {
        Ok(file)
    } else {
        Err(not_a_regular_file())
    }
}

/// Open a file of the store by path for reading (for callers outside the store that
/// hold a path from it): never follows a symlink at the last component, never blocks on
/// a FIFO, and only a regular file is accepted.
pub fn open_regular_path(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    regular(file)
}

/// The last component of `path` as a `str` (every name the store makes is ASCII).
pub fn file_name(path: &Path) -> Option<&str> {
    path.file_name()
        .map(|n| n.as_bytes())
        .and_then(|b| std::str::from_utf8(b).ok())
}
