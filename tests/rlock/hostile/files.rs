//! The files rlock reads (`--password-file`, `--tls-ca`, `--tls-cert`, `--tls-key`): a FIFO, a
//! device, `/dev/zero`, a directory, a symlink loop, an oversized file or one it may not read
//! ends the run at once with 78 and one line naming the file.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::basic::*;
use crate::common::{rlock, run};

/// Each kind of file that is not one rlock may read, made in `dir`, with what the line says.
fn hostile_files(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let (a, b) = (dir.join("loop-a"), dir.join("loop-b"));
    std::os::unix::fs::symlink(&b, &a).expect("symlink");
    std::os::unix::fs::symlink(&a, &b).expect("symlink");
    // Sparse: larger than any bound, without the disk space.
    let huge = dir.join("huge");
    let file = std::fs::File::create(&huge).expect("create");
    file.set_len(8 << 20).expect("set_len");
    let subdir = dir.join("dir");
    std::fs::create_dir(&subdir).expect("mkdir");
    vec![
        (fifo, "FIFO"),
        ("/dev/zero".into(), "character device"),
        ("/dev/null".into(), "character device"),
        (subdir, "directory"),
        (a, "symbolic links"),
        (huge, "larger than"),
    ]
}

/// `rlock OPTION FILE … acquire` for each option, each with the extra arguments it needs.
fn runs_with(file: &Path, certs: &Path) -> Vec<(String, Vec<String>)> {
    let file = file.display().to_string();
    let cert = certs.display().to_string();
    let tls = |args: &[&str]| -> Vec<String> {
        let mut v = vec![
            "--url".to_string(),
            format!("rediss://127.0.0.1:{}", dead_port()),
        ];
        v.extend(args.iter().map(|a| a.to_string()));
        v
    };
    vec![
        (
            "--password-file".into(),
            vec!["--password-file".into(), file.clone()],
        ),
        ("--tls-ca".into(), tls(&["--tls-ca", &file])),
        (
            "--tls-cert".into(),
            tls(&["--tls-cert", &file, "--tls-key", &cert]),
        ),
        (
            "--tls-key".into(),
            tls(&["--tls-cert", &cert, "--tls-key", &file]),
        ),
    ]
}

#[track_caller]
fn assert_refused(cmd: &mut Command, file: &Path, says: &str, what: &str) {
    let (out, took) = run_within(cmd, Duration::from_secs(10));
    assert_one_line(&out, 78);
    assert!(
        out.stderr.contains(&file.display().to_string()) && out.stderr.contains(says),
        "{what}: the line must name {} and say {says}: {out}",
        file.display()
    );
    assert!(took < Duration::from_secs(5), "{what} took {took:?}");
}

#[test]
fn files_that_are_not_regular_files_end_at_once_with_78() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_cdir, cert) = file_with("not a certificate, never read first\n");
    for (file, says) in hostile_files(dir.path()) {
        for (option, args) in runs_with(&file, &cert) {
            let mut cmd = rlock();
            cmd.args(&args).args(["acquire", "-n", "-k", "files"]);
            assert_refused(
                &mut cmd,
                &file,
                says,
                &format!("{option} {}", file.display()),
            );
        }
    }
}

#[test]
fn a_file_rlock_may_not_read_ends_with_78() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (_cdir, cert) = file_with("x\n");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "pw\n").expect("write");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    for (option, args) in runs_with(&secret, &cert) {
        // As root every file is readable: the run drops to nobody.
        let mut cmd = if nix::unistd::getuid().is_root() {
            let mut cmd = Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_rlock"));
            cmd
        } else {
            rlock()
        };
        cmd.env_remove("RLOCK_URL")
            .args(&args)
            .args(["acquire", "-n", "-k", "files"]);
        assert_refused(&mut cmd, &secret, "Permission denied", &option);
    }
}

#[test]
fn a_whole_system_ca_bundle_is_read() {
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if !bundle.exists() {
        return;
    }
    // Read and accepted: the run gets as far as the (dead) server.
    let out = run(rlock()
        .args([
            "--url",
            &format!("rediss://127.0.0.1:{}", dead_port()),
            "--tls-ca",
        ])
        .arg(bundle)
        .args(["--connect-timeout", "0", "acquire", "-n", "-k", "files"]));
    assert_eq!(out.code, 69, "{out}");
}
