use super::*;
use crate::ipvsadm::{parse_args, parse_restore};
use crate::model::{Health, Mode};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// Records every plan applied; serves counters set by the test.
#[derive(Clone, Default)]
struct Recorder {
    plans: Rc<RefCell<Vec<Plan>>>,
    stats: Rc<RefCell<Stats>>,
    zeroed: Rc<RefCell<u32>>,
    fail_next_apply: Rc<RefCell<bool>>,
    detached: Rc<RefCell<bool>>,
    links_down: Rc<RefCell<Vec<String>>>,
}

impl DataPlane for Recorder {
    fn apply(&mut self, plan: &Plan) -> Result<()> {
        if self.fail_next_apply.replace(false) {
            return Err(Error::DataPath("map full".into()));
        }
        self.plans.borrow_mut().push(plan.clone());
        Ok(())
    }
    fn stats(&self) -> Result<Stats> {
        Ok(self.stats.borrow().clone())
    }
    fn zero(&mut self) -> Result<()> {
        *self.zeroed.borrow_mut() += 1;
        Ok(())
    }
    fn attached_everywhere(&self) -> bool {
        !*self.detached.borrow()
    }
    fn links_down(&mut self) -> Vec<String> {
        self.links_down.borrow().clone()
    }
}

const RING: u32 = 251;

fn cmd(d: &mut Daemon<Recorder>, line: &str) -> Reply {
    let words: Vec<&str> = line.split_whitespace().collect();
    d.handle(Request::Command(parse_args(&words).unwrap()))
}

fn ok(d: &mut Daemon<Recorder>, line: &str) -> Vec<String> {
    match cmd(d, line) {
        Reply::Done { warnings } => warnings,
        other => panic!("{line}: {other:?}"),
    }
}

fn slot_of(plan: &Plan, addr: &str) -> usize {
    let a: SocketAddr = addr.parse().unwrap();
    plan.reals
        .iter()
        .position(|r| r.as_ref().map(|r| r.addr) == Some(a))
        .unwrap_or_else(|| panic!("{addr} has no slot"))
}

fn share(plan: &Plan, slot: usize) -> usize {
    plan.services[0]
        .lookup
        .iter()
        .filter(|s| **s as usize == slot)
        .count()
}

#[test]
fn a_command_sequence_yields_plans_over_stable_slots() {
    let rec = Recorder::default();
    let mut d = Daemon::new(rec.clone(), RING).unwrap();
    assert_eq!(
        rec.plans.borrow().len(),
        1,
        "the empty plan is applied at start"
    );
    ok(&mut d, "-A -t 198.18.0.10:6379 -s mh");
    ok(&mut d, "-a -t 198.18.0.10:6379 -r 198.18.100.1 -g -w 1");
    ok(&mut d, "-a -t 198.18.0.10:6379 -r 198.18.100.2 -g -w 1");
    ok(&mut d, "-a -t 198.18.0.10:6379 -r 198.18.100.3 -g -w 2");
    let plan = d.plan().clone();
    assert_eq!(rec.plans.borrow().last(), Some(&plan));
    assert_eq!(plan.services[0].lookup.len(), RING as usize);
    let (s1, s2, s3) = (
        slot_of(&plan, "198.18.100.1:6379"),
        slot_of(&plan, "198.18.100.2:6379"),
        slot_of(&plan, "198.18.100.3:6379"),
    );
    assert!(
        share(&plan, s3) > share(&plan, s1),
        "weight 2 gets more of the table"
    );

    // Weight 0 quiesces: the slot stays (established connections keep their real), the
    // real leaves the lookup table.
    ok(&mut d, "-e -t 198.18.0.10:6379 -r 198.18.100.2 -w 0");
    let quiesced = d.plan().clone();
    assert_eq!(slot_of(&quiesced, "198.18.100.2:6379"), s2);
    assert_eq!(share(&quiesced, s2), 0);
    assert_eq!(slot_of(&quiesced, "198.18.100.1:6379"), s1);
    assert_eq!(slot_of(&quiesced, "198.18.100.3:6379"), s3);

    // Health down does the same, and up brings it back into the table.
    let ev = HealthEvent {
        service: d.table().services[0].key,
        real: "198.18.100.3:6379".parse().unwrap(),
        health: Health::Down,
    };
    assert!(d.set_health(&ev).unwrap());
    let down = d.plan().clone();
    assert_eq!(slot_of(&down, "198.18.100.3:6379"), s3);
    assert_eq!(share(&down, s3), 0);
    assert_eq!(
        share(&down, s1),
        RING as usize,
        "only the healthy, weighted real is left"
    );
    assert!(
        !d.set_health(&ev).unwrap(),
        "the same verdict again changes nothing"
    );
    let up = HealthEvent {
        health: Health::Up,
        ..ev
    };
    assert!(d.set_health(&up).unwrap());
    assert_eq!(d.plan(), &quiesced);

    // Removing a real frees its slot; the others keep theirs.
    ok(&mut d, "-d -t 198.18.0.10:6379 -r 198.18.100.1");
    let after = d.plan().clone();
    assert!(after.reals.get(s1).map(|r| r.is_none()).unwrap_or(true));
    assert_eq!(slot_of(&after, "198.18.100.3:6379"), s3);
    assert_eq!(slot_of(&after, "198.18.100.2:6379"), s2);
}

#[test]
fn a_failing_command_or_apply_changes_nothing() {
    let rec = Recorder::default();
    let mut d = Daemon::new(rec.clone(), RING).unwrap();
    ok(&mut d, "-A -t 198.18.0.10:80");
    let applied = rec.plans.borrow().len();
    let Reply::Error(e) = cmd(&mut d, "-A -t 198.18.0.10:80") else {
        panic!()
    };
    assert!(e.starts_with("Service already exists"), "{e}");
    assert_eq!(rec.plans.borrow().len(), applied);
    *rec.fail_next_apply.borrow_mut() = true;
    let Reply::Error(e) = cmd(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.1") else {
        panic!()
    };
    assert_eq!(e, "map full");
    assert!(d.table().services[0].reals.is_empty());
    ok(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.1");
    assert_eq!(d.table().services[0].reals.len(), 1);
}

#[test]
fn restore_is_all_or_nothing_and_names_the_line() {
    let rec = Recorder::default();
    let mut d = Daemon::new(rec.clone(), RING).unwrap();
    let text = "-A -t 198.18.0.10:80\n-a -t 198.18.0.10:80 -r 198.18.1.1 -b\n\n-a -t 198.18.0.10:80 -r 198.18.1.1 -b\n";
    let Reply::Error(e) = d.handle(Request::Batch(parse_restore(text).unwrap())) else {
        panic!()
    };
    assert!(e.starts_with("line 4: Destination already exists"), "{e}");
    assert!(d.table().services.is_empty());
    assert_eq!(rec.plans.borrow().len(), 1);
    let good = "-A -t 198.18.0.10:80\n-a -t 198.18.0.10:80 -r 198.18.1.1 -b\n";
    let Reply::Done { warnings } = d.handle(Request::Batch(parse_restore(good).unwrap())) else {
        panic!()
    };
    assert_eq!(
        warnings.len(),
        1,
        "full-NAT without a local address: {warnings:?}"
    );
    assert_eq!(
        rec.plans.borrow().len(),
        2,
        "one plan for the whole restore"
    );
}

#[test]
fn a_full_nat_real_enters_the_plan_with_its_first_local_address() {
    let rec = Recorder::default();
    let mut d = Daemon::new(rec.clone(), RING).unwrap();
    ok(&mut d, "-A -t 198.18.0.10:80");
    let w = ok(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.1 -b");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(d.plan().reals.iter().all(|r| r.is_none()));
    assert!(d.plan().services[0].lookup.is_empty());
    assert_eq!(
        d.view().unwrap().services[0].reals.len(),
        1,
        "-L still lists it"
    );
    ok(&mut d, "--add-laddr -z fd00::100 -t 198.18.0.10:80");
    assert!(
        d.plan().reals.iter().all(|r| r.is_none()),
        "a v6 laddr does not serve a v4 real"
    );
    ok(&mut d, "--add-laddr -z 198.18.0.100 -t 198.18.0.10:80");
    let s = slot_of(d.plan(), "198.18.1.1:80");
    assert_eq!(share(d.plan(), s), RING as usize);
    let w = ok(&mut d, "--del-laddr -z 198.18.0.100 -t 198.18.0.10:80");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(d.plan().services[0].lookup.is_empty());
}

#[test]
fn listing_maps_counters_by_slot_and_rates_from_two_samples() {
    let rec = Recorder::default();
    let mut d = Daemon::new(rec.clone(), RING).unwrap();
    ok(&mut d, "-A -t 198.18.0.10:80 --check tcp");
    ok(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.1 -m");
    ok(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.2 -m -w 3");
    let s2 = slot_of(d.plan(), "198.18.1.2:80");
    let counters = |n: u64| Counters {
        conns: n,
        in_pkts: 10 * n,
        out_pkts: 5 * n,
        in_bytes: 1000 * n,
        out_bytes: 500 * n,
    };
    let mut reals = vec![Counters::default(); d.plan().reals.len()];
    reals[s2] = counters(7);
    *rec.stats.borrow_mut() = Stats {
        services: vec![counters(7)],
        reals: reals.clone(),
        reasons: vec![],
    };
    let t0 = Instant::now();
    d.sample_rates(t0).unwrap();
    reals[s2] = counters(27);
    *rec.stats.borrow_mut() = Stats {
        services: vec![counters(27)],
        reals,
        reasons: vec![],
    };
    d.sample_rates(t0 + Duration::from_secs(2)).unwrap();
    let v = d.view().unwrap();
    let svc = &v.services[0];
    assert_eq!(svc.stats, counters(27));
    assert_eq!(svc.rate.cps, 10);
    assert_eq!(svc.rate.in_bps, 10_000);
    assert_eq!(svc.reals[0].stats, Counters::default());
    assert_eq!(svc.reals[1].addr, "198.18.1.2:80".parse().unwrap());
    assert_eq!(svc.reals[1].stats, counters(27));
    assert_eq!(svc.reals[1].rate.out_pps, 50);
    assert_eq!(svc.reals[1].health, Health::Unchecked);
    assert_eq!(svc.reals[1].mode, Mode::Nat);
    let Reply::Done { .. } = cmd(&mut d, "-Z") else {
        panic!()
    };
    assert_eq!(*rec.zeroed.borrow(), 1);
    // Checked reals are left to their check; the rest get the daemon's neighbour refresh.
    assert!(d.neighbour_targets().is_empty());
    assert_eq!(d.check_targets().len(), 2);
    ok(&mut d, "-E -t 198.18.0.10:80 --no-check");
    assert_eq!(d.neighbour_targets().len(), 2);
    assert!(d.check_targets().is_empty());
}

/// The fake data plane for the socket test: the daemon runs on this thread, so it need not
/// be `Send`, but the test reads what it recorded afterwards.
#[derive(Default)]
struct Counting {
    applied: Arc<std::sync::Mutex<Vec<Plan>>>,
}

impl DataPlane for Counting {
    fn apply(&mut self, plan: &Plan) -> Result<()> {
        self.applied.lock().unwrap().push(plan.clone());
        Ok(())
    }
    fn stats(&self) -> Result<Stats> {
        Ok(Stats::default())
    }
    fn zero(&mut self) -> Result<()> {
        Ok(())
    }
}

#[test]
fn commands_reach_the_daemon_over_its_socket_and_stop_removes_it() {
    let dir = std::env::temp_dir().join(format!("ws-lb-test-{}", std::process::id()));
    let path = dir.join("lb.sock");
    let dp = Counting::default();
    let applied = dp.applied.clone();
    let mut d = Daemon::new(dp, RING).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            // A client that panics still stops the daemon: the test fails instead of hanging.
            let _guard = StopAll(vec![stop.clone()]);
            let deadline = Instant::now() + Duration::from_secs(20);
            while !path.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let send = |line: &str| {
                let words: Vec<&str> = line.split_whitespace().collect();
                control::request(&path, &Request::Command(parse_args(&words).unwrap())).unwrap()
            };
            let r1 = send("-A -t 198.18.0.10:80 -s rr");
            let r2 = send("-a -t 198.18.0.10:80 -r 198.18.1.1 -g");
            let r3 = send("-a -t 198.18.0.10:80 -r 198.18.1.1 -g");
            let r4 = send("-L -n");
            let mode = std::fs::metadata(&path).map(|m| {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o777
            });
            stop.store(true, Ordering::Relaxed);
            (r1, r2, r3, r4, mode.unwrap())
        })
    };
    run(&mut d, &RunConfig::new(path.clone()), &stop).unwrap();
    let (r1, r2, r3, r4, mode) = client.join().unwrap();
    assert_eq!(r1, Reply::Done { warnings: vec![] });
    assert_eq!(r2, Reply::Done { warnings: vec![] });
    assert!(matches!(r3, Reply::Error(e) if e.starts_with("Destination already exists")));
    let Reply::List(v) = r4 else { panic!() };
    assert_eq!(
        v.services[0].reals[0].addr,
        "198.18.1.1:80".parse().unwrap()
    );
    assert_eq!(mode, 0o600);
    assert!(!path.exists(), "the socket is removed on stop");
    assert_eq!(applied.lock().unwrap().len(), 3);
    let e = control::request(&path, &Request::View)
        .unwrap_err()
        .to_string();
    assert!(e.contains("wirespeed lb run --iface IF"), "{e}");
    let _ = std::fs::remove_dir(&dir);
}

/// A fake redis on 127.0.0.1 that answers `+PONG` until `stop` is set, then closes.
fn fake_redis(stop: Arc<AtomicBool>) -> (SocketAddr, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    let mut buf = [0u8; 64];
                    let _ = s.read(&mut buf);
                    let _ = s.write_all(b"+PONG\r\n");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (addr, h)
}

#[test]
fn a_health_change_replans_at_once_and_the_listing_shows_it() {
    let dir = std::env::temp_dir().join(format!("ws-lb-health-{}", std::process::id()));
    let path = dir.join("lb.sock");
    let dp = Counting::default();
    let applied = dp.applied.clone();
    let mut d = Daemon::new(dp, RING).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let redis_stop = Arc::new(AtomicBool::new(false));
    let (redis, server) = fake_redis(redis_stop.clone());
    let client = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let _guard = StopAll(vec![stop.clone()]);
            let deadline = Instant::now() + Duration::from_secs(30);
            while !path.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let send = |line: &str| {
                let words: Vec<&str> = line.split_whitespace().collect();
                control::request(&path, &Request::Command(parse_args(&words).unwrap())).unwrap()
            };
            let vip = format!("198.18.0.10:{}", redis.port());
            send(&format!(
                "-A -t {vip} --check redis --check-interval 500ms --check-timeout 500ms --rise 2 --fall 2"
            ));
            send(&format!("-a -t {vip} -r 127.0.0.1"));
            let health = || match send("-L -n") {
                Reply::List(v) => v.services[0].reals[0].health,
                other => panic!("{other:?}"),
            };
            let mut seen = vec![];
            while Instant::now() < deadline {
                let h = health();
                if seen.last() != Some(&h) {
                    seen.push(h);
                }
                if h == Health::Up && !redis_stop.load(Ordering::Relaxed) {
                    // The real is up: now it stops answering.
                    redis_stop.store(true, Ordering::Relaxed);
                }
                if h == Health::Down {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::Relaxed);
            seen
        })
    };
    run(&mut d, &RunConfig::new(path.clone()), &stop).unwrap();
    let seen = client.join().unwrap();
    server.join().unwrap();
    let _ = std::fs::remove_dir(&dir);
    assert_eq!(
        seen.iter()
            .filter(|h| **h != Health::Unchecked)
            .collect::<Vec<_>>(),
        vec![&Health::Up, &Health::Down]
    );
    // The last plan applied is the down one: the real keeps its slot, the table is empty.
    let plans = applied.lock().unwrap();
    let last = plans.last().unwrap();
    assert!(last.reals.iter().any(|r| r.is_some()));
    assert!(last.services[0].lookup.is_empty());
    // Before it, the real held the whole table (up and unchecked plan alike: same weight).
    let before = &plans[plans.len() - 2];
    assert_eq!(before.services[0].lookup.len(), RING as usize);
}

#[test]
fn two_daemons_given_the_same_reals_in_other_orders_list_the_same_tables() {
    let mut a = Daemon::new(Recorder::default(), 65537).unwrap();
    let mut b = Daemon::new(Recorder::default(), 65537).unwrap();
    let reals = [
        "198.18.100.1 -g -w 1",
        "198.18.100.2:8080 -g -w 2",
        "198.18.100.3 -g -w 3",
        "198.18.100.4 -g -w 5",
    ];
    ok(&mut a, "-A -t 198.18.0.10:80 -s mh");
    for r in reals {
        ok(&mut a, &format!("-a -t 198.18.0.10:80 -r {r}"));
    }
    // The other node: an extra real first (so its slots differ), the rest in reverse, then
    // the extra one gone.
    ok(&mut b, "-A -t 198.18.0.10:80 -s mh");
    ok(&mut b, "-a -t 198.18.0.10:80 -r 198.18.100.9 -g -w 1");
    for r in reals.iter().rev() {
        ok(&mut b, &format!("-a -t 198.18.0.10:80 -r {r}"));
    }
    ok(&mut b, "-d -t 198.18.0.10:80 -r 198.18.100.9");
    assert_ne!(a.plan().services[0].lookup, b.plan().services[0].lookup);
    let (va, vb) = (a.view().unwrap(), b.view().unwrap());
    assert_eq!(va.services[0].ring_size, 65537);
    assert_eq!(va.services[0].table_digest.len(), 16);
    assert_eq!(va.services[0].table_digest, vb.services[0].table_digest);
    assert_eq!(crate::peer::compare(&va, &vb), vec![]);
    ok(&mut b, "-e -t 198.18.0.10:80 -r 198.18.100.3 -w 4");
    let vb = b.view().unwrap();
    assert_ne!(va.services[0].table_digest, vb.services[0].table_digest);
    let found: Vec<String> = crate::peer::compare(&va, &vb)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        ["service TCP 198.18.0.10:80: real 198.18.100.3:80 weight 3 here, 4 on the peer: wirespeed lb -e -t 198.18.0.10:80 -r 198.18.100.3:80 -w 4 here, or -w 3 on the peer"]
    );
}

/// ExaBGP's end of `lb announce`: each line written, sent to the test; the write after
/// `lines` lines fails, as a pipe to an ExaBGP that has gone does.
struct ExabgpPipe {
    lines: mpsc::Sender<String>,
    left: usize,
    partial: Vec<u8>,
}

impl std::io::Write for ExabgpPipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            return Err(std::io::ErrorKind::BrokenPipe.into());
        }
        self.partial.extend_from_slice(buf);
        while let Some(i) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=i).collect();
            let _ = self
                .lines
                .send(String::from_utf8_lossy(&line[..i]).into_owned());
            self.left -= 1;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sets both stop flags when the test's client ends, panicking or not, so the daemons stop.
struct StopAll(Vec<Arc<AtomicBool>>);

impl Drop for StopAll {
    fn drop(&mut self) {
        for s in &self.0 {
            s.store(true, Ordering::Relaxed);
        }
    }
}

#[test]
fn lb_announce_follows_the_daemon_through_drain_reals_stop_and_restart() {
    let dir = std::env::temp_dir().join(format!("ws-lb-announce-{}", std::process::id()));
    let path = dir.join("lb.sock");
    let hold_down = Duration::from_millis(300);
    let (lines_tx, lines) = mpsc::channel();
    let follower = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut pipe = ExabgpPipe {
                lines: lines_tx,
                left: 7,
                partial: Vec::new(),
            };
            crate::announce::follow(
                &path,
                &mut crate::exabgp::Exabgp::new(&mut pipe, crate::exabgp::NextHops::default()),
                Duration::from_millis(50),
                &mut |_| {},
            )
        })
    };
    let stops = [
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    ];
    let client = {
        let (path, guard) = (path.clone(), StopAll(stops.to_vec()));
        std::thread::spawn(move || {
            let send = |req: Request| {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    match control::request(&path, &req) {
                        Ok(r) => return r,
                        Err(e) if Instant::now() > deadline => panic!("{e}"),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            };
            let ipvsadm = |line: &str| {
                let words: Vec<&str> = line.split_whitespace().collect();
                send(Request::Command(parse_args(&words).unwrap()))
            };
            let next = || lines.recv_timeout(Duration::from_secs(10)).unwrap();
            let announce = "announce route 198.18.0.10/32 next-hop self";
            let withdraw = "withdraw route 198.18.0.10/32 next-hop self";
            let mut seen = Vec::new();
            ipvsadm("-A -t 198.18.0.10:80");
            let added = Instant::now();
            ipvsadm("-a -t 198.18.0.10:80 -r 198.18.1.1 -g");
            seen.push(next());
            let held = added.elapsed();
            send(Request::Drain(true));
            seen.push(next());
            send(Request::Drain(false));
            seen.push(next());
            ipvsadm("-d -t 198.18.0.10:80 -r 198.18.1.1");
            seen.push(next());
            ipvsadm("-a -t 198.18.0.10:80 -r 198.18.1.1 -g");
            seen.push(next());
            guard.0[0].store(true, Ordering::Relaxed);
            seen.push(next());
            // The second daemon: `lb announce` reconnects by itself.
            ipvsadm("-A -t 198.18.0.10:80");
            ipvsadm("-a -t 198.18.0.10:80 -r 198.18.1.1 -g");
            seen.push(next());
            drop(guard);
            let want = [
                announce, withdraw, announce, withdraw, announce, withdraw, announce,
            ];
            (seen, want.map(String::from).to_vec(), held)
        })
    };
    for stop in &stops {
        let mut d = Daemon::new(Counting::default(), RING).unwrap();
        d.set_announce_hold_down(hold_down);
        run(&mut d, &RunConfig::new(path.clone()), stop).unwrap();
    }
    let (seen, want, held) = client.join().unwrap();
    assert_eq!(seen, want);
    assert!(held >= hold_down, "announced after {held:?}");
    let e = follower.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("ExaBGP stopped reading"), "{e}");
    let _ = std::fs::remove_dir(&dir);
}

#[test]
fn a_failed_apply_withdraws_until_a_plan_is_applied_and_detaching_withdraws() {
    let rec = Recorder::default();
    let mut d = Daemon::new(rec.clone(), RING).unwrap();
    d.set_announce_hold_down(Duration::ZERO);
    ok(&mut d, "-A -t 198.18.0.10:80");
    ok(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.1 -g");
    let t = Instant::now();
    assert!(d.update_announceable(t, false));
    assert_eq!(d.announceable(), ["198.18.0.10".parse::<IpAddr>().unwrap()]);
    *rec.fail_next_apply.borrow_mut() = true;
    assert!(matches!(
        cmd(&mut d, "-a -t 198.18.0.10:80 -r 198.18.1.2 -g"),
        Reply::Error(_)
    ));
    assert!(d.update_announceable(t, false));
    assert!(d.announceable().is_empty(), "the maps may hold half a plan");
    // The same table again: the plan is written again, though it equals the last one built.
    let applied = rec.plans.borrow().len();
    ok(&mut d, "-E -t 198.18.0.10:80 -s mh");
    assert_eq!(rec.plans.borrow().len(), applied + 1);
    assert!(d.update_announceable(t, false));
    assert_eq!(d.announceable().len(), 1);
    *rec.detached.borrow_mut() = true;
    assert!(d.update_announceable(t, false));
    assert!(d.announceable().is_empty());
    *rec.detached.borrow_mut() = false;
    assert!(d.update_announceable(t, false));
    *rec.links_down.borrow_mut() = vec!["eth1".into()];
    assert!(d.update_announceable(t, false), "a port down withdraws");
    assert!(d.announceable().is_empty());
    rec.links_down.borrow_mut().clear();
    assert!(d.update_announceable(t, false));
    assert!(d.update_announceable(t, true), "SIGTERM's drain withdraws");
    assert!(d.announceable().is_empty());
}

#[test]
fn services_that_cannot_move_between_nodes_are_warned_about_once_the_node_announces() {
    let mut d = Daemon::new(Recorder::default(), RING).unwrap();
    let moved = |w: &[String]| w.iter().filter(|l| l.contains("ECMP")).count();
    // Alone, wrr is as good as any scheduler.
    assert_eq!(moved(&ok(&mut d, "-A -t 198.18.100.1:80 -s wrr")), 0);
    assert!(!d.view().unwrap().announcing);
    d.handle(Request::WatchAnnounceable);
    assert!(d.view().unwrap().announcing);
    let w = ok(&mut d, "-A -t 198.18.100.2:80 -s rr");
    assert_eq!(
        w,
        vec!["TCP 198.18.100.2:80 (rr): connections that ECMP moves to another node are reset: there a segment without its entry goes where its hash points, not to the real its SYN was given in turn: wirespeed lb -E -t 198.18.100.2:80 -s mh"]
    );
    assert_eq!(
        moved(&ok(&mut d, "-a -t 198.18.100.1:80 -r 198.18.70.2 -g -w 1")),
        1
    );
    assert_eq!(moved(&ok(&mut d, "-E -t 198.18.100.1:80 -s mh")), 0);
    assert_eq!(
        moved(&ok(&mut d, "-A -u 198.18.100.3:53 -s wrr")),
        0,
        "UDP is placed by hash"
    );
    let w = ok(&mut d, "-a -t 198.18.100.1:80 -r 198.18.70.3 -m -w 1");
    assert_eq!(moved(&w), 0, "NAT's line names no ECMP: {w:?}");
    assert!(
        w.iter()
            .any(|l| l.contains("NAT cannot run on several nodes")),
        "{w:?}"
    );
    let w = ok(&mut d, "-e -t 198.18.100.1:80 -r 198.18.70.3 -b -w 1");
    assert!(
        w.iter()
            .any(|l| l.contains("(mh): connections that ECMP moves to another node are lost")),
        "{w:?}"
    );
    // A change to another service says nothing of this one.
    assert_eq!(moved(&ok(&mut d, "-A -t 198.18.100.4:80 -s mh")), 0);
    let Reply::Done { warnings } = d.handle(Request::Batch(
        parse_restore("-A -t 198.18.100.5:80 -s wrr\n-a -t 198.18.100.5:80 -r 198.18.70.2 -i -w 1\n-A -t 198.18.100.6:80 -s mh\n").unwrap(),
    )) else {
        panic!("restore failed")
    };
    assert_eq!(moved(&warnings), 1, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|l| l.starts_with("TCP 198.18.100.5:80 (wrr)")),
        "{warnings:?}"
    );
}

#[test]
fn lb_announce_reports_exabgp_sessions_and_the_listing_keeps_the_latest() {
    let dir = std::env::temp_dir().join(format!("ws-lb-sessions-{}", std::process::id()));
    let path = dir.join("lb.sock");
    let (lines_tx, lines) = mpsc::channel();
    let reporter = {
        let path = path.clone();
        std::thread::spawn(move || {
            crate::session::report(&path, &lines, Duration::from_millis(100))
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let client = {
        let (path, guard) = (path.clone(), StopAll(vec![stop.clone()]));
        std::thread::spawn(move || {
            let bgp_now = || match control::request(&path, &Request::View) {
                Ok(Reply::List(v)) => v.bgp,
                _ => None,
            };
            let wait_for = |want: crate::session::State| {
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    if let Some(r) = bgp_now().filter(|r| r.sessions[0].state == want) {
                        return r;
                    }
                    assert!(Instant::now() < deadline, "no session {want:?}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            };
            lines_tx
                .send("neighbor 198.18.0.2 connected".into())
                .unwrap();
            lines_tx.send("neighbor 198.18.0.2 down - peer reset, message [notification sent (2,2)] error[OPEN message error / Bad Peer AS / ASN in OPEN (65000) did not match ASN expected (65099)]".into()).unwrap();
            let down = wait_for(crate::session::State::Down);
            assert!(down.ago_s < 2, "{down:?}");
            assert!(
                matches!(
                    down.sessions[0].last_down,
                    Some(crate::session::Reason::Notification {
                        code: 2,
                        subcode: 2,
                        ..
                    })
                ),
                "{down:?}"
            );
            lines_tx.send("neighbor 198.18.0.2 up".into()).unwrap();
            wait_for(crate::session::State::Up);
            drop(lines_tx);
            drop(guard);
        })
    };
    let mut d = Daemon::new(Counting::default(), RING).unwrap();
    run(&mut d, &RunConfig::new(path.clone()), &stop).unwrap();
    client.join().unwrap();
    reporter.join().unwrap();
    let _ = std::fs::remove_dir(&dir);
}
