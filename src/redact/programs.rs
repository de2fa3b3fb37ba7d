//! What rlock knows of particular programs' command lines: which of their short options are
//! harmless or take a secret, which run a command elsewhere (read again as a command line of its
//! own), which run the word after them, which take Oracle's `user/password@db`.

/// Programs for which those letters mean something harmless (`mkdir -p`, `ls -a`, `ssh -p`).
pub(super) const HARMLESS: &[(&str, &str)] = &[
    ("mkdir", "p"),
    ("cp", "apP"),
    ("mv", "p"),
    ("install", "p"),
    ("ls", "aP"),
    ("rsync", "apP"),
    ("tar", "apP"),
    ("ssh", "p"),
    ("scp", "pP"),
    ("git", "ap"),
    ("docker", "a"),
    ("terraform", "apP"),
    ("kubectl", "ap"),
    ("psql", "p"),
    ("pg_dump", "p"),
    ("pg_restore", "p"),
    ("grep", "aP"),
    ("ps", "ap"),
    ("pgrep", "a"),
    ("df", "aP"),
    ("du", "aP"),
    ("uname", "ap"),
    ("netstat", "ap"),
    ("ss", "ap"),
    ("lsof", "ap"),
    ("patch", "p"),
    ("diff", "ap"),
    ("tee", "a"),
    ("xargs", "pP"),
    ("find", "P"),
    ("openssl", "paP"),
];

/// Short options that take a secret, for one program: `openssl enc -k X`, `ldapsearch -w X`.
pub(super) const PROGRAM_SECRET_LETTERS: &[(&str, &str)] = &[
    ("openssl", "k"),
    ("ldapsearch", "w"),
    ("ldapmodify", "w"),
    ("ldapadd", "w"),
    ("ldapdelete", "w"),
    ("ldapwhoami", "w"),
    ("ldappasswd", "wsa"),
    ("ldapcompare", "w"),
    ("ldapmodrdn", "w"),
    ("ldapexop", "w"),
    ("ldapurl", "w"),
];

/// Short options after which every word is a secret: `htpasswd -b FILE USER PASSWORD`.
pub(super) const PROGRAM_SECRET_REST: &[(&str, &str)] = &[("htpasswd", "b")];

/// Programs that run a command somewhere else, named after a host, container or pod (itself
/// after options): the letters of their options that take a value, and the long ones. The
/// command is read again as a command line of its own (`ssh db1 mysql -pX`).
pub(super) const REMOTES: &[(&str, &str, &[&str])] = &[
    ("ssh", "bcDEeFIiJLlmOoPpQRSWw", &[]),
    (
        "docker exec",
        "euw",
        &["env", "env-file", "user", "workdir", "detach-keys"],
    ),
    (
        "podman exec",
        "euw",
        &[
            "env",
            "env-file",
            "user",
            "workdir",
            "detach-keys",
            "preserve-fds",
        ],
    ),
    (
        "kubectl exec",
        "cnf",
        &[
            "container",
            "namespace",
            "filename",
            "context",
            "cluster",
            "kubeconfig",
            "pod-running-timeout",
        ],
    ),
];

/// Programs that take `user/password@db` as a word: Oracle's.
pub(super) const SLASH_LOGINS: [&str; 7] =
    ["sqlplus", "rman", "exp", "imp", "expdp", "impdp", "sqlldr"];

/// Words that run the word after them as a program.
pub(super) const WRAPPERS: [&str; 9] = [
    "env", "sudo", "exec", "nohup", "time", "nice", "command", "xargs", "doas",
];

/// Shells, whose `-c` word is a command line.
pub(super) const SHELLS: [&str; 6] = ["sh", "bash", "dash", "zsh", "ksh", "ash"];

/// A program with rules of its own here (secret letters, a command it runs elsewhere, Oracle's
/// logins, Redis's AUTH, `vault login TOKEN`).
pub(super) fn knows(word: &str) -> bool {
    PROGRAM_SECRET_LETTERS.iter().any(|(p, _)| *p == word)
        || PROGRAM_SECRET_REST.iter().any(|(p, _)| *p == word)
        || REMOTES.iter().any(|(p, _, _)| *p == word)
        || SLASH_LOGINS.contains(&word)
        || matches!(
            word,
            "docker" | "podman" | "kubectl" | "redis-cli" | "valkey-cli" | "vault"
        )
}

/// The program that runs a command elsewhere (`ssh`, `docker exec`), with the options of its
/// that take a value.
pub(super) fn remote(program: &str) -> Option<(&'static str, &'static [&'static str])> {
    REMOTES
        .iter()
        .find(|(name, _, _)| *name == program)
        .map(|(_, letters, longs)| (*letters, *longs))
}
