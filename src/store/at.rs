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
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Open the lock directory itself. Its path is the caller's choice (`--dir`,
    /// `TASKLOCK_DIR`, a `.locks` found by discovery), so a symlink there is followed,
    /// once: everything below is reached through this descriptor and never follows one.
    pub fn open_root(path: &Path) -> io::Result<Dir> {
        let flags = DIR_FLAGS.difference(OFlags::NOFOLLOW);
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(dir_error)?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
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
        match rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => return Ok(Some(Dir { fd, path })),
            Err(Errno::NOENT) if create => {}
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(dir_error(e)),
        }
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o777)) {
            // Made by us or by another process meanwhile: either way it is opened
            // without following a symlink, so what was made is checked, not assumed.
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = rustix::fs::openat(&self.fd, name, DIR_FLAGS, Mode::empty()).map_err(dir_error)?;
        Ok(Some(Dir { fd, path }))
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

    /// Create `name`, which must not exist (a symlink there counts as existing).
    pub fn create_new(&self, name: &str, mode: u32) -> io::Result<File> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    }

    /// Open `name` for reading and writing, creating it when missing; only a regular
    /// file is accepted.
    pub fn open_rw(&self, name: &str, append: bool) -> io::Result<File> {
        let mut flags =
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        if append {
            flags |= OFlags::APPEND;
        }
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o644))?;
        let file = regular(File::from(fd))?;
        // Back to blocking: a regular file never blocks on O_NONBLOCK anyway, and the
        // flag must not leak into what std expects of the file.
        let fl = rustix::fs::fcntl_getfl(&file)?;
        rustix::fs::fcntl_setfl(&file, fl - OFlags::NONBLOCK)?;
        Ok(file)
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
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
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
