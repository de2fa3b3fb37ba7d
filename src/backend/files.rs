//! Reading the files rlock is given (`--password-file`, `--tls-*`): regular files only, of
//! bounded size, opened without blocking. A FIFO, a device, `/dev/zero`, a directory, a symlink
//! loop or an oversized file ends the run at once with 78 and one line naming the file, instead
//! of hanging on a FIFO nobody writes or reading `/dev/zero` until memory runs out.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::SetupError;

/// The largest password file rlock reads: a password is a line.
pub const PASSWORD_MAX: u64 = 64 * 1024;

/// The largest certificate or key file: a system's whole CA bundle is about 220 KB
/// (Debian's /etc/ssl/certs/ca-certificates.crt, 2026).
pub const TLS_MAX: u64 = 1024 * 1024;

/// The contents of the file `path`, given as `what` (`--tls-ca`), if it is a regular file of at
/// most `max` bytes; else a configuration error that names it.
pub fn read_bounded(what: &str, path: &Path, max: u64) -> Result<Vec<u8>, SetupError> {
    let fail = |why: String| SetupError::Config(format!("{what} '{}' {why}", path.display()));
    // O_NONBLOCK: opening a FIFO for reading waits for a writer without it. O_NOCTTY: a
    // terminal never becomes rlock's controlling one.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(format!("cannot be read: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot be read: {e}")))?;
    let kind = meta.file_type();
    let not_regular = if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else if !kind.is_file() {
        Some("not a file")
    } else {
        None
    };
    if let Some(kind) = not_regular {
        return Err(fail(format!(
            "is {kind}: rlock reads only regular files here"
        )));
    }
    let too_big = || {
        fail(format!(
            "is larger than {max} bytes, more than {what} can hold"
        ))
    };
    if meta.len() > max {
        return Err(too_big());
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    // A file that grows while it is read is still cut at the bound.
    file.take(max + 1)
        .read_to_end(&mut out)
        .map_err(|e| fail(format!("cannot be read: {e}")))?;
    if out.len() as u64 > max {
        return Err(too_big());
    }
    Ok(out)
}
