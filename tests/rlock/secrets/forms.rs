//! Secrets in every form users write them (the issue's list), on the command line of a shell
//! that runs `acquire` and in the command of an `exec`: never in any key rlock writes, in
//! `inspect` (table and JSON), in a busy waiter's message or in `-v` output.

use std::time::Duration;

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_for_file};

/// The forms, each with its own secret; every secret holds `S3C`.
const FORMS: &[&str] = &[
    "mysql -pS3C01 db",
    "app -aS3C02",
    "sshpass -pS3C03 ssh h",
    "sh -c 'mysql -pS3C04 db'",
    "sh -c \"deploy --password 'S3C05 15'\"",
    "docker run --env=MYSQL_ROOT_PASSWORD=S3C06 x",
    "docker run -e MYSQL_ROOT_PASSWORD=S3C07 x",
    "curl -u user:S3C08 https://h",
    "curl -H 'Authorization: Bearer S3C09' https://h",
    "GITHUB_PAT=S3C10 ./release",
    "helm upgrade a c --set db.password=S3C11",
    "git clone https://S3C12@github.com/o/r",
    "curl -H 'X-Api-Key: S3C13' https://h",
    "export API_TOKEN=S3C14",
    // The forms that reached Redis in clear before the fifth release.
    "curl -su user:S3C15 https://h",
    "curl -U proxy:S3C16 https://h",
    "curl --cert f.pem:S3C17 https://h",
    "docker exec redis redis-cli -a S3C18 ping",
    "kubectl exec -it -n ns pod -- redis-cli -a S3C19 ping",
    "ssh db1 mysql -pS3C20",
    "redis-cli AUTH user S3C21",
    "mysql -e \"ALTER USER x IDENTIFIED BY 'S3C22'\"",
    "openssl enc -k S3C23 -in f",
    "htpasswd -b f u S3C24",
    "ldapsearch -w S3C25 -D cn=admin",
    "smbclient -U u%S3C26 //h/s",
    "lftp -u u,S3C27 h",
    "sqlplus scott/S3C28@db",
    "app '--password S3C29'",
    "env X=1 sudo -u postgres sh -c 'mysql -pS3C30'",
    // The forms --record-args left in clear in the fifth release.
    "app --data S3CdXNlcjpwYXNzd29yZDEyMzQ1Njc4OQ==",
    "vault login S3C66",
    "sh -c 'echo S3C67 | docker login -u me --password-stdin reg'",
];

/// Every key in the server, every field and member of it, as text.
pub(super) fn dump_everything(server: &RedisServer) -> String {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    let mut dump = String::new();
    for key in keys {
        let value: redis::Value = match server.key_type(&key).as_str() {
            "string" => server.cmd(&["GET", &key]),
            "hash" => server.cmd(&["HGETALL", &key]),
            "list" => server.cmd(&["LRANGE", &key, "0", "-1"]),
            "set" => server.cmd(&["SMEMBERS", &key]),
            "zset" => server.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
            "stream" => server.cmd(&["XRANGE", &key, "-", "+"]),
            other => panic!("{key} is a {other}, which this test does not read"),
        };
        dump.push_str(&format!("{key}: {value:?}\n"));
    }
    dump
}

/// The words of `form` as the shell splits them.
fn words(form: &str) -> Vec<String> {
    let out = run(&mut sh(&format!("printf '%s\\n' {form}")));
    assert_eq!(out.code, 0, "{out}");
    out.stdout.lines().map(String::from).collect()
}

#[track_caller]
pub(super) fn assert_nowhere(what: &str, text: &str) {
    assert!(!text.contains("S3C"), "{what} shows a secret:\n{text}");
}

/// Redis, inspect (table, JSON, -v) and a busy waiter's message, for the lock `key`.
pub(super) fn assert_no_secret_anywhere(server: &RedisServer, key: &str) {
    assert_nowhere("Redis", &dump_everything(server));
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["inspect", "-k", key],
        &["inspect", "--json", "-k", key],
        &["-v", "inspect", "-k", key],
        &["-v", "acquire", "-n", "-k", key],
        &["-v", "exec", "-n", "-k", key, "--", "true"],
        &["inspect", "--history", "-k", key],
        &["inspect", "--history", "--json", "-k", key],
    ] {
        let out = run(rlock_at(server).args(args));
        assert_nowhere(&format!("{args:?}"), &format!("{out}"));
    }
}

#[test]
fn secrets_on_the_calling_shells_command_line_are_masked_in_every_form() {
    let server = RedisServer::start();
    for (i, form) in FORMS.iter().enumerate() {
        let key = format!("shell{i}");
        // The shell runs rlock and goes on (`; :`), so the holder recorded is the shell, with
        // the form on its command line.
        let script = format!(
            "\"$RL\" -u {} acquire --record-args -k {key} --ttl 1h >/dev/null; : {form}",
            server.url()
        );
        let out = run(&mut sh(&script));
        assert_eq!(out.code, 0, "{form}\n{out}");
        let cmd = server.hgetall(&state_key(&key))["cmd"].clone();
        assert!(cmd.contains("acquire --record-args -k"), "{form}: {cmd}");
        assert_no_secret_anywhere(&server, &key);
    }
}

#[test]
fn secrets_in_an_execs_command_are_masked_in_every_form() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, form) in FORMS.iter().enumerate() {
        let key = format!("exec{i}");
        let started = dir.path().join(format!("started{i}"));
        // The form's words are the command's own arguments; `sh -c` only waits.
        let mut cmd = rlock_at(&server);
        cmd.args(["exec", "--record-args", "-k", &key, "--", "sh", "-c"])
            .arg(r#"echo up > "$1"; sleep 30"#)
            .arg("sh")
            .arg(&started)
            .args(words(form));
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn exec");
        wait_for_file(&started, Duration::from_secs(10));
        assert_no_secret_anywhere(&server, &key);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = child.wait();
    }
}

/// More forms, for the default settings: none of their arguments may be stored at all.
const MORE: &[&str] = &[
    "mysql --user=admin --password=S3C31 shop",
    "psql postgres://app:S3C32@db/shop",
    "aws configure set aws_secret_access_key S3C33",
    "npm config set //r/:_authToken S3C34",
    "vault login S3C35",
    "gh auth login --with-token S3C36",
    "docker login -u me -p S3C37 reg",
    "git -c http.extraheader='AUTHORIZATION: basic S3C38' fetch",
    "keytool -storepass S3C39 -list",
    "openssl pkcs12 -passin pass:S3C40 -in f",
    "java -Djavax.net.ssl.keyStorePassword=S3C41 -jar app.jar",
    "mongo mongodb://u:S3C42@h/db",
    "redis-cli -u redis://:S3C43@h:6379 ping",
    "rclone sync a b --s3-secret-access-key S3C44",
    "terraform apply -var db_password=S3C45",
    "ansible-playbook p.yml -e ansible_become_pass=S3C46",
    "wget --http-password=S3C47 https://h",
    "az login -u me -p S3C48",
    "mc alias set s3 https://h AK S3C49",
    "restic -r s3:h/b backup --password-command 'echo S3C50'",
    "borg create ::a /x BORG_PASSPHRASE=S3C51",
    "pg_dump 'postgresql://u:S3C52@h/db'",
    "curl -d '{\"password\":\"S3C53\"}' https://h",
    "kubectl create secret generic s --from-literal=pw=S3C54",
    "helm install r c --set-string auth.password=S3C55",
    "sshpass -p S3C56 scp f h:",
    "ftp ftp://u:S3C57@h/f",
    "zip -P S3C58 a.zip f",
    "7z a -pS3C59 a.7z f",
    "unrar x -pS3C60 a.rar",
    "gpg --passphrase S3C61 -d f",
    "mysql -hdb -uroot -pS3C62",
    "ldapmodify -xwS3C63 -f x.ldif",
    "mosquitto_pub -u u -P S3C64 -t t -m m",
    "influx -username u -password S3C65",
];

#[test]
fn with_default_settings_no_argument_of_any_form_is_kept_anywhere() {
    let server = RedisServer::start();
    let forms: Vec<&str> = FORMS.iter().chain(MORE).copied().collect();
    assert!(forms.len() >= 60, "{}", forms.len());
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, form) in forms.iter().enumerate() {
        let key = format!("d{i}");
        let started = dir.path().join(format!("started{i}"));
        let mut cmd = rlock_at(&server);
        cmd.args(["exec", "-k", &key, "--", "sh", "-c"])
            .arg(r#"echo up > "$1"; sleep 30"#)
            .arg("sh")
            .arg(&started)
            .args(words(form));
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn exec");
        wait_for_file(&started, Duration::from_secs(10));
        assert_eq!(server.hgetall(&state_key(&key))["cmd"], "sh", "{form}");
        assert_no_secret_anywhere(&server, &key);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = child.wait();
        // And on the calling shell's command line, for acquire.
        let script = format!(
            "\"$RL\" -u {} acquire -k s{i} --ttl 1h >/dev/null; : {form}",
            server.url()
        );
        let out = run(&mut sh(&script));
        assert_eq!(out.code, 0, "{form}\n{out}");
    }
    assert_nowhere("Redis", &dump_everything(&server));
    for args in [
        &["inspect", "--history"][..],
        &["inspect", "--history", "--json"],
        &["inspect", "--json"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_nowhere(&format!("{args:?}"), &format!("{out}"));
    }
}

#[test]
fn by_default_only_the_programs_name_is_recorded() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server)
        .args(["exec", "-k", "p0", "--", "/bin/sh", "-c"])
        .arg("rlock inspect >/dev/null; : --opaque-secret-form S3C")
        .args(FORMS.iter().flat_map(|f| words(f))));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall(&state_key("p0"))["cmd"], "sh");
    // --program-only, the opt-in to that default before it was one, is gone: a usage error,
    // the command never run.
    let out = run(rlock_at(&server).args(["exec", "--program-only", "-k", "p1", "--", "true"]));
    assert_eq!(out.code, 2, "{out}");
    assert!(server.hgetall(&state_key("p1")).is_empty(), "{out}");
    let script = format!(
        "\"$RL\" -u {} acquire -k p2 >/dev/null; : S3C",
        server.url()
    );
    let out = run(&mut sh(&script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall(&state_key("p2"))["cmd"], "sh");
    // A label still wins.
    let out = run(rlock_at(&server).args([
        "exec", "--label", "nightly", "-k", "p3", "--", "true", "S3C",
    ]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall(&state_key("p3"))["cmd"], "nightly");
    assert_no_secret_anywhere(&server, "p3");
    let history = run(rlock_at(&server).args(["inspect", "--history", "--json", "-k", "p0"]));
    assert_nowhere("--history", &format!("{history}"));
}

#[test]
fn a_long_command_line_or_label_is_stored_cut_at_the_cap() {
    let server = RedisServer::start();
    // 1 MiB of arguments (one argument may hold at most 128 KiB), and a label of 64 KiB.
    let word = "x".repeat(64 << 10);
    let out = run(rlock_at(&server)
        .args(["exec", "--record-args", "-k", "long", "--", "true"])
        .args(std::iter::repeat_n(&word, 16)));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["exec", "--label", &word, "-k", "label", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    for key in ["long", "label"] {
        let cmd = &server.hgetall(&state_key(key))["cmd"];
        assert!(
            cmd.len() <= 4096 && cmd.ends_with("…[cut]"),
            "{key}: {} bytes",
            cmd.len()
        );
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(format!("{{rlock:{key}}}:history"))
            .arg("-")
            .arg("+")
            .query(&mut server.conn())
            .expect("XRANGE");
        let size: usize = entries[0].1.iter().map(String::len).sum();
        assert!(size < 4096 + 512, "{key}: an entry of {size} bytes");
    }
}
