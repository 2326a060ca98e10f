//! The runtime driven end to end: executor, timers, cross-shard messages, sockets on both
//! engines, shutdown.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use wirespeed_rt::io::Socket;
use wirespeed_rt::sync::{Mutex, Semaphore};
use wirespeed_rt::{EngineKind, Runtime};

const ENGINES: [EngineKind; 2] = [EngineKind::Epoll, EngineKind::Uring];

fn one_shard(engine: EngineKind) -> wirespeed_rt::RuntimeBuilder {
    Runtime::builder().cpus(vec![0]).engine(engine)
}

#[test]
fn timers_fire_in_order_and_timeout_cancels() {
    for engine in ENGINES {
        let out = one_shard(engine)
            .run(|| async {
                let order = Rc::new(std::cell::RefCell::new(Vec::new()));
                let mut handles = Vec::new();
                for (i, ms) in [30u64, 10, 20].into_iter().enumerate() {
                    let order = order.clone();
                    handles.push(wirespeed_rt::spawn(async move {
                        wirespeed_rt::sleep(Duration::from_millis(ms)).await;
                        order.borrow_mut().push(i);
                    }));
                }
                for h in handles {
                    h.await;
                }
                let t = wirespeed_rt::timeout(
                    Duration::from_millis(5),
                    wirespeed_rt::sleep(Duration::from_secs(5)),
                )
                .await;
                let ok = wirespeed_rt::timeout(Duration::from_secs(5), async { 7 }).await;
                let mut iv = wirespeed_rt::interval(Duration::from_millis(2));
                let start = Instant::now();
                for _ in 0..5 {
                    iv.tick().await;
                }
                let ticks = start.elapsed();
                let v = order.borrow().clone();
                (v, t.is_err(), ok, ticks >= Duration::from_millis(8))
            })
            .unwrap();
        assert_eq!(
            out[0],
            (vec![1, 2, 0], true, Ok(7), true),
            "engine {engine}"
        );
    }
}

#[test]
fn sleep_reset_later_and_earlier() {
    let out = one_shard(EngineKind::Epoll)
        .run(|| async {
            let start = Instant::now();
            let mut s = wirespeed_rt::sleep(Duration::from_millis(5));
            s.reset(Instant::now() + Duration::from_millis(40));
            (&mut s).await;
            let later = start.elapsed();
            let start = Instant::now();
            let mut s = wirespeed_rt::sleep(Duration::from_secs(10));
            // Poll once so it is queued, then move it earlier.
            let _ = wirespeed_rt::timeout(Duration::from_millis(1), &mut s).await;
            s.reset(Instant::now() + Duration::from_millis(5));
            s.await;
            (later, start.elapsed())
        })
        .unwrap();
    assert!(
        out[0].0 >= Duration::from_millis(40),
        "reset later fired early: {:?}",
        out[0].0
    );
    assert!(
        out[0].1 < Duration::from_secs(5),
        "reset earlier did not fire early: {:?}",
        out[0].1
    );
}

#[test]
fn shards_are_pinned_and_exchange_messages() {
    let cpus = wirespeed_rt::sys::allowed_cpus().unwrap();
    let cpus: Vec<usize> = cpus.into_iter().take(2).collect();
    let n = cpus.len();
    let expect_cpus = cpus.clone();
    let out = Runtime::builder()
        .cpus(cpus)
        .run(move || async move {
            let me = wirespeed_rt::shard_id();
            let peer = (me + 1) % wirespeed_rt::shard_count();
            // 10k round trips through the rings, with results coming back.
            let mut sum = 0u64;
            for i in 0..10_000u64 {
                sum += wirespeed_rt::smp::submit_to(peer, move || async move {
                    i * 2 + wirespeed_rt::shard_id() as u64
                })
                .await;
            }
            (
                me,
                wirespeed_rt::cpu(),
                wirespeed_rt::sys::current_cpu(),
                sum,
            )
        })
        .unwrap();
    assert_eq!(out.len(), n);
    for (i, (id, cpu, running_on, sum)) in out.into_iter().enumerate() {
        assert_eq!(id, i);
        assert_eq!(cpu, expect_cpus[i]);
        assert_eq!(running_on, cpu, "shard {i} not pinned");
        let peer = ((i + 1) % n) as u64;
        assert_eq!(sum, (0..10_000u64).map(|x| x * 2 + peer).sum::<u64>());
    }
}

#[test]
fn mutex_and_semaphore_serialize_tasks() {
    let out = one_shard(EngineKind::Epoll)
        .run(|| async {
            let m = Rc::new(Mutex::new(0u32));
            let sem = Rc::new(Semaphore::new(2));
            let inside = Rc::new(Cell::new(0u32));
            let max_inside = Rc::new(Cell::new(0u32));
            let mut hs = Vec::new();
            for _ in 0..10 {
                let (m, sem, inside, max_inside) =
                    (m.clone(), sem.clone(), inside.clone(), max_inside.clone());
                hs.push(wirespeed_rt::spawn(async move {
                    let _p = sem.acquire().await;
                    inside.set(inside.get() + 1);
                    max_inside.set(max_inside.get().max(inside.get()));
                    let mut g = m.lock().await;
                    let v = *g;
                    wirespeed_rt::sleep(Duration::from_millis(1)).await;
                    *g = v + 1;
                    drop(g);
                    inside.set(inside.get() - 1);
                }));
            }
            for h in hs {
                h.await;
            }
            let v = *m.lock().await;
            (v, max_inside.get())
        })
        .unwrap();
    assert_eq!(out[0], (10, 2));
}

fn nonblocking(fd: impl Into<OwnedFd>) -> OwnedFd {
    let fd: OwnedFd = fd.into();
    let s = socket2::Socket::from(fd);
    s.set_nonblocking(true).unwrap();
    s.into()
}

#[test]
fn sockets_echo_on_both_engines() {
    for engine in ENGINES {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let lfd = nonblocking(listener);
        let lfd = std::sync::Mutex::new(Some(lfd));
        let client = std::thread::spawn(move || {
            let mut total = Vec::new();
            for c in 0..20u8 {
                let mut s = StdStream::connect(addr).unwrap();
                let msg = vec![c; 100_000];
                s.write_all(&msg).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                let mut back = Vec::new();
                s.read_to_end(&mut back).unwrap();
                assert_eq!(back, msg, "engine {engine}: echo mismatch");
                total.push(back.len());
            }
            total.iter().sum::<usize>()
        });
        let served = one_shard(engine)
            .run(move || {
                let fd = lfd.lock().unwrap().take().unwrap();
                async move {
                    let l = Socket::register(fd).unwrap();
                    let mut bytes = 0usize;
                    for _ in 0..20 {
                        let c = Socket::register(l.accept().await.unwrap()).unwrap();
                        let mut buf = vec![0u8; 8192];
                        loop {
                            let n = c.recv(&mut buf).await.unwrap();
                            if n == 0 {
                                break;
                            }
                            c.send_all(&buf[..n]).await.unwrap();
                            bytes += n;
                        }
                    }
                    bytes
                }
            })
            .unwrap();
        assert_eq!(client.join().unwrap(), 2_000_000);
        assert_eq!(served[0], 2_000_000);
    }
}

#[test]
fn connect_and_dropped_futures_are_safe() {
    for engine in ENGINES {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(b"late").unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            b
        });
        let out = one_shard(engine)
            .run(move || async move {
                let raw = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .unwrap();
                raw.set_nonblocking(true).unwrap();
                let s = Socket::register(raw.into()).unwrap();
                s.connect(addr).await.unwrap();
                let mut buf = [0u8; 16];
                // A recv abandoned by its timeout must not lose or corrupt later data.
                assert!(
                    wirespeed_rt::timeout(Duration::from_millis(5), s.recv(&mut buf))
                        .await
                        .is_err()
                );
                let n = s.recv(&mut buf).await.unwrap();
                s.send_all(b"pong").await.unwrap();
                buf[..n].to_vec()
            })
            .unwrap();
        assert_eq!(out[0], b"late", "engine {engine}");
        assert_eq!(&server.join().unwrap(), b"pong");
    }
}

#[test]
fn shutdown_handle_stops_every_shard() {
    let rt = Runtime::builder()
        .cpus(vec![0, 0])
        .pin(false)
        .build()
        .unwrap();
    let h = rt.shutdown_handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        h.shutdown();
    });
    let out = rt
        .run(|| async {
            wirespeed_rt::shutdown_signal().await;
            wirespeed_rt::shutdown_requested()
        })
        .unwrap();
    stopper.join().unwrap();
    assert_eq!(out, vec![true, true]);
}

#[test]
fn bad_cpu_is_a_clear_error() {
    let err = Runtime::builder()
        .cpus(vec![4095])
        .build()
        .err()
        .expect("cpu 4095 should not be allowed");
    assert!(err.to_string().contains("not available"), "{err}");
}
