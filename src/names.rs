//! Where a statically linked rlock looks names up.
//!
//! The Linux build is linked statically (`.cargo/config.toml`), so that the binary runs on any
//! Linux of its architecture and starts without loading shared libraries. A static glibc has its
//! `files` and `dns` name services built in; any other (`systemd`, `sss`, `ldap`, `mdns`, ...)
//! it would load from the host's shared libraries, which work only if they are of the very glibc
//! rlock was built with. So rlock asks for those two alone, as Go's tools (`consul`, `etcdctl`)
//! do: host names from /etc/hosts and DNS, user names from /etc/passwd (which `identity` reads
//! itself, for less). A user name that only a directory service knows is not looked up; rlock
//! records `$USER`, `$LOGNAME` or the uid instead.

/// Pins the host and user databases to the services built into a static glibc, before the first
/// lookup; called where one may follow (a host name to resolve), once. Pinning reads
/// nsswitch.conf, which a run that looks nothing up (its Redis named by an address) is spared.
/// Does nothing in a dynamically linked build, which loads whatever nsswitch.conf names.
pub fn pin_builtin_services() {
    static PINNED: std::sync::Once = std::sync::Once::new();
    PINNED.call_once(pin);
}

fn pin() {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
    {
        unsafe extern "C" {
            /// glibc: use `service_line` for `db` instead of what nsswitch.conf says.
            fn __nss_configure_lookup(
                db: *const std::ffi::c_char,
                service_line: *const std::ffi::c_char,
            ) -> std::ffi::c_int;
        }
        for (db, services) in [(c"hosts", c"files dns"), (c"passwd", c"files")] {
            // SAFETY: two NUL-terminated static strings; called (by the main thread, while it
            // sets up) before any lookup is made, as glibc asks.
            unsafe { __nss_configure_lookup(db.as_ptr(), services.as_ptr()) };
        }
    }
}
