//! One file per subcommand; this one holds what they share.

pub mod acquire;
pub mod events;
pub mod exec;
mod hint;
pub mod inspect;
pub mod nested;
mod once;
pub mod record;
pub mod release;
pub mod renew;
pub mod take;
mod waiting;

use crate::backend::{Settings, TlsFiles, split_urls};
use crate::cli::{Global, SharingArgs};
use crate::exit::Failure;
use crate::lock::{LockKey, Locker, Note, Observer, Sharing, human_ms};

/// The global options, resolved.
pub struct Context {
    pub global: Global,
    pub settings: Settings,
    /// `--events`: each step as a JSON line.
    pub events: Option<events::Events>,
}

impl Context {
    pub fn new(global: Global) -> Result<Self, Failure> {
        // A password command has --connect-timeout to run; with 0 (one try), a try's own bound.
        let command_bound = match global.connect_timeout.is_zero() {
            true => global.op_timeout,
            false => global.connect_timeout,
        };
        let password = Settings::resolve_password(
            global.password_file.as_deref(),
            global.password_command.as_deref(),
            command_bound,
        )?;
        // RLOCK_URL lists its URLs comma-separated; a --url is one URL, whatever it holds (a
        // password may have a comma).
        let env_urls = std::env::var("RLOCK_URL").ok();
        let urls = match global.urls.as_slice() {
            [one] if env_urls.as_deref() == Some(one.as_str()) => split_urls(one),
            many => many.to_vec(),
        };
        let settings = Settings {
            urls,
            cluster: global.cluster,
            sentinel: global.sentinel.clone(),
            password,
            user: global.user.clone(),
            replicas: global.replicas,
            tls: TlsFiles {
                ca: global.tls_ca.clone(),
                cert: global.tls_cert.clone(),
                key: global.tls_key.clone(),
            },
            op_timeout: global.op_timeout,
        };
        let events = events::Events::new(global.events.as_deref(), global.events_to.as_deref());
        Ok(Context {
            global,
            settings,
            events,
        })
    }

    pub fn key(&self, name: &str) -> Result<LockKey, Failure> {
        Ok(LockKey::new(&self.global.prefix, name)?)
    }

    pub fn locker(&self) -> Result<Locker, Failure> {
        let nodes = self.settings.connect()?;
        for node in &nodes {
            self.say(format_args!("using {}", node.name()));
        }
        if nodes.len() > 1 {
            self.say(format_args!(
                "Redlock over {} masters: a majority of {} must agree",
                nodes.len(),
                nodes.len() / 2 + 1
            ));
        }
        if self.settings.replicas > 0 {
            self.say(format_args!(
                "a grant or renewal counts once {} replica(s) have it (WAIT, within {})",
                self.settings.replicas,
                crate::lock::human_duration(self.settings.op_timeout)
            ));
        }
        Ok(Locker::new(nodes, self.settings.op_timeout)
            .with_first_contact(self.global.connect_timeout))
    }

    /// A diagnostic line on stderr, with --verbose only: escaped, and never a panic when
    /// stderr is gone (`crate::output::message`).
    pub fn say(&self, msg: std::fmt::Arguments) {
        if self.global.verbose {
            crate::output::message(&msg.to_string());
        }
    }

    /// A note on stderr, unless --quiet.
    pub fn note(&self, msg: std::fmt::Arguments) {
        if !self.global.quiet {
            crate::output::message(&msg.to_string());
        }
    }
}

/// What the layers below report, as lines on stderr: outages a waiter rides out (unless -q),
/// how a wait goes and failed renewals (with -v).
impl Observer for Context {
    fn observe(&self, note: Note<'_>) {
        if let Some(events) = &self.events {
            event_of(events, &note);
        }
        match note {
            Note::WaitBegins { key, seen, place } => {
                self.say(format_args!("{}", waiting::begins(key, seen, place)))
            }
            Note::StillWaiting {
                key,
                waited,
                seen,
                place,
                new_holder,
            } => self.say(format_args!(
                "{}",
                waiting::goes_on(key, waited, seen, place, new_holder)
            )),
            Note::OutageBegan {
                key,
                failure,
                first_contact: None,
            } => self.note(format_args!(
                "{}; still waiting for lock '{key}', trying again at most 1s apart",
                Failure::from(failure.clone())
            )),
            Note::OutageBegan {
                failure,
                first_contact: Some(bound),
                ..
            } => self.note(format_args!(
                "{}; trying again for up to {} (--connect-timeout)",
                Failure::from(failure.clone()),
                crate::lock::human_duration(bound)
            )),
            Note::OutageEnded { key, after } => self.note(format_args!(
                "Redis answers again after {}; still waiting for lock '{key}'",
                human_ms(after.as_millis() as i64)
            )),
            Note::ServerFull { key, failure } => self.say(format_args!(
                "{}; still waiting for lock '{key}', trying again at most 1s apart",
                Failure::from(failure.clone())
            )),
            Note::RoomAgain { key, after } => self.say(format_args!(
                "Redis has room again after {}; still waiting for lock '{key}'",
                human_ms(after.as_millis() as i64)
            )),
            Note::RenewalFailed { error } => {
                self.say(format_args!("renewal failed, retrying: {error}"))
            }
            Note::RenewedLate { late, left } => self.say(format_args!(
                "renewed {} late, with {} of the lease left",
                human_ms(late.as_millis() as i64),
                human_ms(left.as_millis() as i64)
            )),
            Note::Spread { held, of } => {
                self.say(format_args!("the lock is now on {held} of {of} masters"))
            }
        }
    }

    fn hears_progress(&self) -> bool {
        self.global.verbose
    }
}

/// The event a note makes, if any (`--events`).
fn event_of(events: &events::Events, note: &Note<'_>) {
    use serde_json::json;
    match note {
        Note::WaitBegins { key, seen, place } => {
            let holder = match seen {
                crate::lock::Seen::Held { holder, pttl, .. } => json!({
                    "host": holder.host,
                    "pid": holder.pid.as_ref().and_then(|p| p.number()),
                    "user": holder.user,
                    "command": holder.command,
                    "expires_ms": (*pttl >= 0).then_some(*pttl),
                }),
                crate::lock::Seen::Handed => serde_json::Value::Null,
            };
            events.emit("waiting", key, json!({ "holder": holder, "place": place }));
        }
        Note::OutageBegan { key, failure, .. } => events.emit(
            "outage_began",
            key,
            json!({ "error.type": Failure::from((*failure).clone()).to_string() }),
        ),
        Note::OutageEnded { key, after } => events.emit(
            "outage_ended",
            key,
            json!({ "outage_ms": after.as_millis() as u64 }),
        ),
        Note::RenewalFailed { error } => events.emit(
            "renewal_failed",
            "",
            json!({ "error.type": error.to_string() }),
        ),
        Note::RenewedLate { late, left } => events.emit(
            "renewed_late",
            "",
            json!({
                "late_ms": late.as_millis() as u64,
                "lease_left_ms": left.as_millis() as u64,
            }),
        ),
        _ => {}
    }
}

/// The token from --token or $RLOCK_TOKEN, which release and renew need.
pub fn required_token(token: &Option<String>, what: &str) -> Result<String, Failure> {
    match token.as_deref() {
        Some(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        Some(_) => Err(Failure::Usage(format!("the token to {what} with is empty"))),
        None => Err(Failure::Usage(format!(
            "no token to {what} with: pass --token T or set $RLOCK_TOKEN (printed by 'rlock acquire')"
        ))),
    }
}

/// The kind of lock `--limit`/`--shared` ask for. Redlock (several URLs) takes only exclusive
/// locks: independent masters could each admit a different N holders (see docs/sharing.md).
pub fn sharing(locker: &Locker, args: &SharingArgs) -> Result<Sharing, Failure> {
    let sharing = Sharing::from_args(args.limit, args.shared);
    if sharing != Sharing::Exclusive && locker.is_quorum() {
        let what = if args.shared {
            "--shared".to_string()
        } else {
            format!("--limit {}", args.limit.unwrap_or_default())
        };
        return Err(Failure::Usage(format!(
            "{what} is not available with several --url (Redlock): rlock takes only exclusive locks over Redlock; use one Redis (or Sentinel, or Cluster) for semaphores and shared locks"
        )));
    }
    Ok(sharing)
}
