//! Private and group-shared lock directories.
//!
//! A lock directory is private unless it has the setgid bit and group write (see
//! [`super::at::is_shared_mode`]): then it is shared with its group. In a private one
//! tasklock creates files 0600 and directories 0700; in a shared one 0660 and 2770, the
//! umask notwithstanding.

use std::os::fd::AsFd;
use std::path::Path;

use rustix::fs::Gid;

use super::at::{self, Dir};
use crate::error::{Error, Result};

/// A Unix group's id from its name or number (`/etc/group`).
pub fn group_id(name: &str) -> Option<u32> {
    if let Ok(n) = name.parse::<u32>() {
        return Some(n);
    }
    std::fs::read_to_string("/etc/group").ok().and_then(|text| {
        text.lines().find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == name).then_some(())?;
            f.nth(1)?.parse().ok()
        })
    })
}

/// A group's name from `/etc/group`, else its number as text.
pub fn group_name(gid: u32) -> String {
    std::fs::read_to_string("/etc/group")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse() == Ok(gid)).then(|| name.to_string())
            })
        })
        .unwrap_or_else(|| gid.to_string())
}

/// Make the (existing) lock directory `root` shared with the group `gid`: the directory
/// gets that group and mode 2770, and every entry below it the caller may change gets
/// the group and 0660 (files) or 2770 (directories). Returns the entries that could not
/// be changed (another user's). Nothing is followed through a symlink.
pub fn make_shared(root: &Path, gid: u32) -> Result<Vec<String>> {
    let dir = Dir::open_root(root).map_err(|e| Error::io(root, e))?;
    let set = |fd: std::os::fd::BorrowedFd<'_>, mode: u32| -> std::io::Result<()> {
        rustix::fs::fchown(fd, None, Some(Gid::from_raw(gid)))?;
        rustix::fs::fchmod(fd, at::mode(mode))?;
        Ok(())
    };
    set(dir.fd(), at::SHARED_DIR).map_err(|e| {
        Error::io(
            root,
            std::io::Error::other(format!(
                "cannot give it the group {} and mode 2770 ({e}); only its owner (a member of that group) or root can",
                group_name(gid)
            )),
        )
    })?;
    let mut left = Vec::new();
    convert(&dir, &set, &mut left, 0);
    Ok(left)
}

fn convert(
    dir: &Dir,
    set: &dyn Fn(std::os::fd::BorrowedFd<'_>, u32) -> std::io::Result<()>,
    left: &mut Vec<String>,
    depth: usize,
) {
    let Ok(entries) = dir.entries() else { return };
    for (name, is_dir) in entries {
        let path = dir.join(&name).display().to_string();
        if is_dir {
            match dir.sub(&name, false) {
                Ok(Some(sub)) => {
                    if set(sub.fd(), at::SHARED_DIR).is_err() {
                        left.push(path);
                    }
                    if depth < 4 {
                        convert(&sub, set, left, depth + 1);
                    }
                }
                _ => left.push(path),
            }
        } else {
            match dir.open_regular(&name) {
                Ok(Some(f)) => {
                    if set(f.as_fd(), at::SHARED_FILE).is_err() {
                        left.push(path);
                    }
                }
                Ok(None) => {}
                Err(_) => left.push(path),
            }
        }
    }
}

/// Entries below `root` whose mode does not fit the directory's mode: in a private one
/// anything the group or others may use; in a shared one anything the group cannot
/// read and write (or that has another group), or that others may use. Each as
/// "path (mode)"; symlinks are not followed.
pub fn mismatched(root: &Path, shared: bool, gid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in rd.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            let mode = meta.mode() & 0o7777;
            let is_dir = meta.is_dir();
            let bad = if !shared {
                mode & 0o077 != 0
            } else if is_dir {
                mode & 0o2070 != 0o2070 || mode & 0o007 != 0 || meta.gid() != gid
            } else {
                mode & 0o060 != 0o060 || mode & 0o007 != 0 || meta.gid() != gid
            };
            if bad {
                out.push(format!("{} ({mode:04o})", path.display()));
            }
            if is_dir && depth < 4 {
                stack.push((path, depth + 1));
            }
        }
    }
    out.sort();
    out
}
