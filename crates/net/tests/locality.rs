//! Perfect locality, proven: with two shards on two CPUs and the CBPF program attached, every
//! accepted connection's SO_INCOMING_CPU equals the CPU of the shard that accepted it.

use std::net::{SocketAddr, TcpStream as StdStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wirespeed_net::kernel::{bind_group, int_option, ListenOptions, Listener, Locality};
use wirespeed_rt::{EngineKind, Runtime};

const PER_CLIENT_CPU: usize = 600;

fn run(engine: EngineKind, locality: Locality) -> Vec<(usize, usize, usize, usize)> {
    let cpus = vec![0usize, 1];
    let opts = ListenOptions {
        locality,
        ..ListenOptions::default()
    };
    let fds = bind_group("127.0.0.1:0".parse().unwrap(), &cpus, &opts).unwrap();
    let addr: SocketAddr = {
        let s = socket2::Socket::from(fds[0].try_clone().unwrap());
        s.local_addr().unwrap().as_socket().unwrap()
    };
    let fds = Arc::new(Mutex::new(fds.into_iter().map(Some).collect::<Vec<_>>()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let rt = Runtime::builder()
        .cpus(cpus.clone())
        .engine(engine)
        .build()
        .unwrap();
    let stop = rt.shutdown_handle();

    // Clients pinned to each CPU: on loopback the SYN and the final ACK are processed in the
    // sender's softirq, on the sender's CPU.
    let total = 2 * PER_CLIENT_CPU;
    let counter = accepted.clone();
    let driver = std::thread::spawn(move || {
        let clients: Vec<_> = [0usize, 1]
            .into_iter()
            .map(|cpu| {
                std::thread::spawn(move || {
                    wirespeed_rt::sys::pin_to_cpu(cpu).unwrap();
                    for _ in 0..PER_CLIENT_CPU {
                        let s = StdStream::connect(addr).unwrap();
                        drop(s);
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while counter.load(Ordering::SeqCst) < total && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.shutdown();
    });

    let out = rt
        .run(move || {
            let fd = fds.lock().unwrap()[wirespeed_rt::shard_id()]
                .take()
                .unwrap();
            let accepted = accepted.clone();
            let opts = opts.clone();
            async move {
                let l = Listener::new(fd, opts).unwrap();
                let (mut n, mut local, mut nodelay) = (0, 0, 0);
                loop {
                    let conn =
                        match wirespeed_rt::timeout(Duration::from_millis(20), l.accept()).await {
                            Ok(c) => c.unwrap(),
                            Err(_) if wirespeed_rt::shutdown_requested() => break,
                            Err(_) => continue,
                        };
                    n += 1;
                    if conn.incoming_cpu() == Some(wirespeed_rt::cpu()) {
                        local += 1;
                    }
                    if int_option(&conn, libc::IPPROTO_TCP, libc::TCP_NODELAY).unwrap() != 0 {
                        nodelay += 1;
                    }
                    accepted.fetch_add(1, Ordering::SeqCst);
                }
                (wirespeed_rt::cpu(), n, local, nodelay)
            }
        })
        .unwrap();
    driver.join().unwrap();
    out
}

#[test]
fn cbpf_keeps_every_connection_on_its_receiving_cpu() {
    for engine in [EngineKind::Epoll, EngineKind::Uring] {
        let out = run(engine, Locality::Cbpf);
        let total: usize = out.iter().map(|r| r.1).sum();
        let local: usize = out.iter().map(|r| r.2).sum();
        let nodelay: usize = out.iter().map(|r| r.3).sum();
        assert_eq!(total, 2 * PER_CLIENT_CPU, "engine {engine}: {out:?}");
        assert_eq!(
            local, total,
            "engine {engine}: connections off their CPU: {out:?}"
        );
        assert_eq!(nodelay, total, "engine {engine}: TCP_NODELAY not inherited");
        for (cpu, n, _, _) in &out {
            assert_eq!(
                *n, PER_CLIENT_CPU,
                "engine {engine}: shard on CPU {cpu} got {n}"
            );
        }
    }
}

#[test]
fn without_cbpf_the_hash_spreads_connections_anywhere() {
    let out = run(EngineKind::Epoll, Locality::None);
    let total: usize = out.iter().map(|r| r.1).sum();
    let local: usize = out.iter().map(|r| r.2).sum();
    assert_eq!(total, 2 * PER_CLIENT_CPU);
    // The hash ignores the CPU, so about half land on the other shard.
    assert!(
        local < total,
        "hash placement was perfectly local by chance: {out:?}"
    );
}
