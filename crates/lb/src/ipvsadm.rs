//! ipvsadm's command line, parsed into a [`Command`], and the ipvsadm-save format written and
//! read. Our extensions (health checks on `-A`/`-E`, `--no-toa`, DPVS's `--add-laddr`) ride
//! on the same lines, so a saved configuration is one file.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{CheckKind, HealthCheck, Mode, Proto, Scheduler, ServiceKey, TunnelKind};
use crate::table::{RealSpec, ServiceSpec, TunnelSpec};
use crate::{Error, Result};

/// What `-L` was asked to show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListOptions {
    pub stats: bool,
    pub rate: bool,
    /// `--exact`: counters without K/M/G scaling.
    pub exact: bool,
    pub json: bool,
    /// `-t|-u VIP:PORT`: this service only.
    pub service: Option<ServiceKey>,
}

/// One ipvsadm command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    AddService(ServiceSpec),
    EditService(ServiceSpec),
    DelService(ServiceKey),
    AddReal {
        service: ServiceKey,
        real: RealSpec,
    },
    EditReal {
        service: ServiceKey,
        real: RealSpec,
    },
    DelReal {
        service: ServiceKey,
        addr: SocketAddr,
    },
    AddLaddr {
        service: ServiceKey,
        addr: IpAddr,
    },
    DelLaddr {
        service: ServiceKey,
        addr: IpAddr,
    },
    List(ListOptions),
    Zero(Option<ServiceKey>),
    Clear,
}

impl Command {
    /// True for the commands that change the configuration (what `restore` accepts).
    pub fn changes(&self) -> bool {
        !matches!(self, Command::List(_) | Command::Zero(_))
    }
}

/// The defaults of our health-check extension.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(2);
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(1);
pub const DEFAULT_RISE: u32 = 2;
pub const DEFAULT_FALL: u32 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verb {
    AddService,
    EditService,
    DelService,
    AddReal,
    EditReal,
    DelReal,
    AddLaddr,
    DelLaddr,
    List,
    Zero,
    Clear,
}

fn verb_of(opt: &str) -> Option<Verb> {
    Some(match opt {
        "-A" | "--add-service" => Verb::AddService,
        "-E" | "--edit-service" => Verb::EditService,
        "-D" | "--delete-service" => Verb::DelService,
        "-a" | "--add-server" => Verb::AddReal,
        "-e" | "--edit-server" => Verb::EditReal,
        "-d" | "--delete-server" => Verb::DelReal,
        "--add-laddr" => Verb::AddLaddr,
        "--del-laddr" => Verb::DelLaddr,
        "-L" | "-l" | "--list" => Verb::List,
        "-Z" | "--zero" => Verb::Zero,
        "-C" | "--clear" => Verb::Clear,
        _ => return None,
    })
}

/// The short options that take no value, which ipvsadm lets a user run together (`-Ln`).
const BUNDLABLE: &str = "AEDaedLlZCgimbn";

fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// `VIP:PORT`, `[V6]:PORT`. The port must be given and be 1-65535.
pub fn parse_vip(s: &str) -> Result<SocketAddr> {
    let a: SocketAddr = s.parse().map_err(|_| {
        invalid(format!(
            "`{s}` is not VIP:PORT; write 198.18.0.10:80 or [fd00::10]:80"
        ))
    })?;
    if a.port() == 0 {
        return Err(invalid(format!(
            "`{s}`: port 0 is not a service port; give one in 1-65535"
        )));
    }
    Ok(a)
}

/// `RIP`, `RIP:PORT`, `[V6]`, `[V6]:PORT` or a bare IPv6 address; port 0 means "not given".
pub fn parse_real(s: &str) -> Result<SocketAddr> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        if a.port() == 0 {
            return Err(invalid(format!(
                "`{s}`: port 0 is not a port; leave it out to use the service's port"
            )));
        }
        return Ok(a);
    }
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 0))
        .map_err(|_| {
            invalid(format!(
                "`{s}` is not RIP[:PORT]; write 198.18.1.2, 198.18.1.2:80 or [fd00::2]:80"
            ))
        })
}

/// A local address for `-z`: `ADDR` or `[V6]`.
pub fn parse_laddr(s: &str) -> Result<IpAddr> {
    s.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| invalid(format!("-z: `{s}` is not an IP address")))
}

/// `2s`, `500ms`, `1m`, or a number of seconds; more than zero.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let bad = || invalid(format!("`{s}` is not a duration; write 2s, 500ms or 1m"));
    let (num, unit_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000)
    } else {
        (s, 1000)
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let ms = n.checked_mul(unit_ms).ok_or_else(bad)?;
    if ms == 0 {
        return Err(invalid(format!("`{s}`: a duration must be more than zero")));
    }
    Ok(Duration::from_millis(ms))
}

/// As [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn parse_check(s: &str) -> Result<CheckKind> {
    match s {
        "tcp" => Ok(CheckKind::Tcp),
        "redis" => Ok(CheckKind::Redis),
        "http" => Ok(CheckKind::Http { path: "/".into() }),
        _ => match s.strip_prefix("http:") {
            Some(path) if path.starts_with('/') && !path.contains(char::is_whitespace) => {
                Ok(CheckKind::Http { path: path.into() })
            }
            _ => Err(invalid(format!(
                "--check `{s}` is not one of tcp, http, http:/PATH, redis"
            ))),
        },
    }
}

pub(crate) fn format_check(kind: &CheckKind) -> String {
    match kind {
        CheckKind::Tcp => "tcp".into(),
        CheckKind::Redis => "redis".into(),
        CheckKind::Http { path } if path == "/" => "http".into(),
        CheckKind::Http { path } => format!("http:{path}"),
    }
}

fn parse_count(opt: &str, s: &str) -> Result<u32> {
    s.parse::<u32>()
        .ok()
        .filter(|n| (1..=1000).contains(n))
        .ok_or_else(|| invalid(format!("{opt} `{s}`: give a count in 1-1000")))
}

/// Parses one ipvsadm command line (without the program name).
pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<Command> {
    let mut given = Given::default();
    let mut it = expand(args).into_iter();
    while let Some(opt) = it.next() {
        given.take(&opt, &mut it)?;
    }
    given.command()
}

/// Bundled short flags (`-Ln`) and `--opt=value` as separate words.
fn expand<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    for a in args {
        let a = a.as_ref();
        if a.len() > 2
            && a.starts_with('-')
            && !a.starts_with("--")
            && a[1..].chars().all(|c| BUNDLABLE.contains(c))
        {
            argv.extend(a[1..].chars().map(|c| format!("-{c}")));
        } else if let (true, Some((k, v))) = (a.starts_with("--"), a.split_once('=')) {
            argv.push(k.to_string());
            argv.push(v.to_string());
        } else {
            argv.push(a.to_string());
        }
    }
    argv
}

/// Everything a command line gave, before the command it makes is checked and built.
#[derive(Default)]
struct Given {
    /// The command, and the option that named it (for the error lines).
    verb: Option<(Verb, String)>,
    service: Option<ServiceKey>,
    scheduler: Option<Scheduler>,
    real: Option<SocketAddr>,
    mode: Option<(Mode, String)>,
    weight: Option<u32>,
    laddr: Option<IpAddr>,
    tunnel: TunnelSpec,
    stats: bool,
    rate: bool,
    exact: bool,
    json: bool,
    check: Option<CheckKind>,
    interval: Option<Duration>,
    timeout: Option<Duration>,
    rise: Option<u32>,
    fall: Option<u32>,
    no_toa: bool,
    no_check: bool,
}

impl Given {
    /// Takes option `opt`, and its value from `rest` when it has one.
    fn take(&mut self, opt: &str, rest: &mut impl Iterator<Item = String>) -> Result<()> {
        let mut value = |what: &str| {
            rest.next()
                .ok_or_else(|| invalid(format!("{opt} needs {what}")))
        };
        if let Some(v) = verb_of(opt) {
            if let Some((_, first)) = &self.verb {
                return Err(invalid(format!(
                    "more than one command given ({first} and {opt}); give one"
                )));
            }
            self.verb = Some((v, opt.to_string()));
            return Ok(());
        }
        match opt {
            "-t" | "--tcp-service" | "-u" | "--udp-service" => {
                if self.service.is_some() {
                    return Err(invalid("give one service (-t or -u VIP:PORT)"));
                }
                let proto = if opt == "-t" || opt == "--tcp-service" {
                    Proto::Tcp
                } else {
                    Proto::Udp
                };
                let vip = parse_vip(&value("VIP:PORT")?)?;
                self.service = Some(ServiceKey { proto, vip });
            }
            "-s" | "--scheduler" => {
                self.scheduler = Some(Scheduler::parse(&value("mh, rr or wrr")?)?)
            }
            "-r" | "--real-server" => self.real = Some(parse_real(&value("RIP[:PORT]")?)?),
            "-w" | "--weight" => self.weight = Some(parse_weight(&value("a weight")?)?),
            "-g" | "--gatewaying" | "-i" | "--ipip" | "-m" | "--masquerading" | "-b"
            | "--fullnat" => self.take_mode(opt)?,
            "--tun-type" | "--tun-port" | "--tun-csum" | "--tun-nocsum" | "--tun-remcsum" => {
                self.take_tunnel(opt, value)?
            }
            "-z" | "--laddr" => self.laddr = Some(parse_laddr(&value("a local address")?)?),
            "-n" | "--numeric" => {}
            "--stats" => self.stats = true,
            "--rate" => self.rate = true,
            "--exact" | "-X" => self.exact = true,
            "--json" => self.json = true,
            "--check" => self.check = Some(parse_check(&value("tcp, http[:PATH] or redis")?)?),
            "--check-interval" => self.interval = Some(parse_duration(&value("a duration")?)?),
            "--check-timeout" => self.timeout = Some(parse_duration(&value("a duration")?)?),
            "--rise" => self.rise = Some(parse_count("--rise", &value("a count")?)?),
            "--fall" => self.fall = Some(parse_count("--fall", &value("a count")?)?),
            "--no-toa" => self.no_toa = true,
            "--no-check" => self.no_check = true,
            _ => {
                return Err(invalid(format!(
                    "unknown option `{opt}`; see wirespeed lb --help"
                )))
            }
        }
        Ok(())
    }

    /// One of -g, -i, -m, -b: the forwarding method.
    fn take_mode(&mut self, opt: &str) -> Result<()> {
        let m = match opt {
            "-g" | "--gatewaying" => Mode::Dr,
            "-i" | "--ipip" => Mode::Tunnel,
            "-m" | "--masquerading" => Mode::Nat,
            _ => Mode::FullNat,
        };
        if let Some((_, first)) = &self.mode {
            return Err(invalid(format!(
                "two forwarding methods given ({first} and {opt}); give one of -g, -i, -m, -b"
            )));
        }
        self.mode = Some((m, opt.to_string()));
        Ok(())
    }

    /// One of the --tun-* options: the tunnel's encapsulation.
    fn take_tunnel(&mut self, opt: &str, value: impl FnOnce(&str) -> Result<String>) -> Result<()> {
        match opt {
            "--tun-type" => self.tunnel.kind = Some(TunnelKind::parse(&value("ipip or gue")?)?),
            "--tun-port" => {
                let v = value("a UDP port")?;
                self.tunnel.port =
                    Some(v.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                        invalid(format!(
                            "--tun-port `{v}`: give the real's GUE port in 1-65535"
                        ))
                    })?);
            }
            "--tun-remcsum" => {
                return Err(invalid(
                    "--tun-remcsum is not built; give --tun-csum or --tun-nocsum",
                ))
            }
            _ => {
                let csum = opt == "--tun-csum";
                if self.tunnel.csum == Some(!csum) {
                    return Err(invalid("--tun-csum and --tun-nocsum contradict; give one"));
                }
                self.tunnel.csum = Some(csum);
            }
        }
        Ok(())
    }

    /// Fails when an option given belongs to none of the groups the command takes: service
    /// options, real options, listing options, a local address.
    fn allowed(&self, svc: bool, rl: bool, ls: bool, z: bool) -> Result<()> {
        let service_opts = self.scheduler.is_some()
            || self.check.is_some()
            || self.interval.is_some()
            || self.timeout.is_some()
            || self.rise.is_some()
            || self.fall.is_some()
            || self.no_toa
            || self.no_check;
        let real_opts = self.real.is_some()
            || self.mode.is_some()
            || self.weight.is_some()
            || self.tunnel.is_given();
        let list_opts = self.stats || self.rate || self.exact || self.json;
        let stray = [
            (service_opts && !svc, "-s/--check options"),
            (real_opts && !rl, "-r/-g/-i/-m/-b/-w/--tun-*"),
            (list_opts && !ls, "--stats/--rate/--exact/--json"),
            (self.laddr.is_some() && !z, "-z"),
        ];
        match stray.iter().find(|(bad, _)| *bad) {
            Some((_, what)) => Err(invalid(format!(
                "{what} do not go with {}",
                self.verb_name()
            ))),
            None => Ok(()),
        }
    }

    fn verb_name(&self) -> &str {
        self.verb.as_ref().map_or("", |(_, name)| name)
    }

    fn need_service(&self) -> Result<ServiceKey> {
        let name = self.verb_name();
        self.service
            .ok_or_else(|| invalid(format!("{name} needs -t|-u VIP:PORT")))
    }

    fn need_real(&self) -> Result<SocketAddr> {
        let name = self.verb_name();
        self.real
            .ok_or_else(|| invalid(format!("{name} needs -r RIP[:PORT]")))
    }

    fn need_laddr(&self) -> Result<IpAddr> {
        let name = self.verb_name();
        self.laddr
            .ok_or_else(|| invalid(format!("{name} needs -z ADDR")))
    }

    /// The health check --check and its companions describe, with the defaults filled in.
    fn health_check(&self) -> Result<Option<HealthCheck>> {
        let Some(kind) = self.check.clone() else {
            if self.interval.is_some()
                || self.timeout.is_some()
                || self.rise.is_some()
                || self.fall.is_some()
            {
                return Err(invalid(
                    "--check-interval, --check-timeout, --rise and --fall need --check KIND",
                ));
            }
            return Ok(None);
        };
        if self.no_check {
            return Err(invalid("--check and --no-check contradict; give one"));
        }
        let interval = self.interval.unwrap_or(DEFAULT_CHECK_INTERVAL);
        let timeout = self.timeout.unwrap_or(DEFAULT_CHECK_TIMEOUT.min(interval));
        if timeout > interval {
            return Err(invalid(format!(
                "--check-timeout {} is longer than --check-interval {}; make it at most the interval",
                format_duration(timeout),
                format_duration(interval)
            )));
        }
        Ok(Some(HealthCheck {
            kind,
            interval,
            timeout,
            rise: self.rise.unwrap_or(DEFAULT_RISE),
            fall: self.fall.unwrap_or(DEFAULT_FALL),
        }))
    }

    fn service_spec(&self) -> Result<ServiceSpec> {
        Ok(ServiceSpec {
            key: self.need_service()?,
            scheduler: self.scheduler,
            check: self.health_check()?,
            no_check: self.no_check,
            no_toa: self.no_toa,
        })
    }

    fn real_spec(&self) -> Result<RealSpec> {
        Ok(RealSpec {
            addr: self.need_real()?,
            mode: self.mode.as_ref().map(|m| m.0),
            weight: self.weight,
            tunnel: self.tunnel,
        })
    }

    /// The command the options make, once each is checked against it.
    fn command(self) -> Result<Command> {
        let Some((verb, _)) = self.verb else {
            return Err(invalid(
                "no command given; give one of -A -E -D -a -e -d -L -Z -C --add-laddr --del-laddr",
            ));
        };
        Ok(match verb {
            Verb::AddService | Verb::EditService => {
                self.allowed(true, false, false, false)?;
                if verb == Verb::AddService && self.no_check {
                    return Err(invalid(
                        "--no-check goes with -E; -A without --check has none",
                    ));
                }
                let s = self.service_spec()?;
                if verb == Verb::AddService {
                    Command::AddService(s)
                } else {
                    Command::EditService(s)
                }
            }
            Verb::DelService => {
                self.allowed(false, false, false, false)?;
                Command::DelService(self.need_service()?)
            }
            Verb::AddReal | Verb::EditReal => {
                self.allowed(false, true, false, false)?;
                let (service, real) = (self.need_service()?, self.real_spec()?);
                if verb == Verb::AddReal {
                    Command::AddReal { service, real }
                } else {
                    Command::EditReal { service, real }
                }
            }
            Verb::DelReal => {
                if self.mode.is_some() || self.weight.is_some() || self.tunnel.is_given() {
                    self.allowed(false, false, false, false)?;
                }
                self.allowed(false, true, false, false)?;
                Command::DelReal {
                    service: self.need_service()?,
                    addr: self.need_real()?,
                }
            }
            Verb::AddLaddr | Verb::DelLaddr => {
                self.allowed(false, false, false, true)?;
                let (service, addr) = (self.need_service()?, self.need_laddr()?);
                if verb == Verb::AddLaddr {
                    Command::AddLaddr { service, addr }
                } else {
                    Command::DelLaddr { service, addr }
                }
            }
            Verb::List => {
                self.allowed(false, false, true, false)?;
                if self.stats && self.rate {
                    return Err(invalid("--stats and --rate are two listings; give one"));
                }
                Command::List(ListOptions {
                    stats: self.stats,
                    rate: self.rate,
                    exact: self.exact,
                    json: self.json,
                    service: self.service,
                })
            }
            Verb::Zero => {
                self.allowed(false, false, false, false)?;
                Command::Zero(self.service)
            }
            Verb::Clear => {
                self.allowed(false, false, false, false)?;
                if self.service.is_some() {
                    return Err(invalid(
                        "-C clears everything and takes no service; to remove one use -D",
                    ));
                }
                Command::Clear
            }
        })
    }
}

fn parse_weight(v: &str) -> Result<u32> {
    v.parse::<u32>()
        .ok()
        .filter(|w| *w <= 65535)
        .ok_or_else(|| invalid(format!("-w `{v}`: give a weight in 0-65535 (0 quiesces)")))
}

/// Reads the ipvsadm-save format: one command per line, blank lines and `#` comments skipped.
/// Each command comes with its line number; an error names the line.
pub fn parse_restore(text: &str) -> Result<Vec<(usize, Command)>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let cmd = parse_args(&words).map_err(|e| invalid(format!("line {n}: {e}")))?;
        if !cmd.changes() {
            return Err(invalid(format!(
                "line {n}: `{line}` changes nothing; restore takes ipvsadm-save lines"
            )));
        }
        out.push((n, cmd));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
