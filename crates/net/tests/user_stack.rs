//! The socket API on the bypass stack, without a NIC: two `BypassStack`s on one shard, joined
//! by the in-memory driver pair. The same async code as on the kernel stack.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use wirespeed_net::bypass::socket::{BypassStack, StackConfig};
use wirespeed_net::{TcpListener, TcpStream};
use wirespeed_nic::mem::{MemConfig, MemPair};
use wirespeed_rt::{EngineKind, Runtime};

fn cfg(last: u8) -> StackConfig {
    StackConfig {
        ip: Ipv4Addr::new(198, 18, 30, last),
        prefix_len: 24,
        gateway: None,
        ipv6: None,
        mac: [0x02, 0, 0, 0, 0, last],
        mtu: 1500,
        max_connections: 256,
        ephemeral_ports: None,
        rx_steering: None,
        accept_partial_checksums: false,
        congestion_control: wirespeed_net::bypass::CongestionAlgorithm::Cubic,
    }
}

/// What `body` returns, run on a one-CPU runtime with a server stack (`cfg(2)`) and a client
/// stack (`cfg(1)`) joined by an in-memory pair shaped by `link`.
fn on_two_stacks<F, Fut>(link: MemConfig, body: F) -> Fut::Output
where
    F: Fn(BypassStack, BypassStack) -> Fut + Send + Sync + 'static,
    Fut: Future + 'static,
    Fut::Output: Send + 'static,
{
    let body = Arc::new(body);
    let mut out = Runtime::builder()
        .cpus(vec![0])
        .engine(EngineKind::Epoll)
        .run(move || {
            let body = body.clone();
            async move {
                let (a, b) = MemPair::with_config(link);
                body(
                    BypassStack::start(&cfg(2), a),
                    BypassStack::start(&cfg(1), b),
                )
                .await
            }
        })
        .unwrap();
    out.remove(0)
}

/// Echoes everything `conn` sends until it closes; returns the bytes echoed.
async fn echo_until_eof(mut conn: TcpStream) -> usize {
    let (mut buf, mut total) = (vec![0u8; 8192], 0);
    loop {
        let n = conn.read(&mut buf).await.unwrap();
        if n == 0 {
            return total;
        }
        conn.write_all(&buf[..n]).await.unwrap();
        total += n;
    }
}

/// Sends `data` in 10 kB pieces, each echoed back before the next goes out; returns what came
/// back.
async fn echo_lockstep(s: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    let mut back = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 16384];
    for chunk in data.chunks(10_000) {
        s.write_all(chunk).await.unwrap();
        let want = back.len() + chunk.len();
        while back.len() < want {
            let n = wirespeed_rt::timeout(std::time::Duration::from_secs(10), s.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("read stalled at {} bytes", back.len()))
                .unwrap();
            assert!(n > 0, "early EOF");
            back.extend_from_slice(&buf[..n]);
        }
    }
    back
}

#[test]
fn echo_through_two_user_stacks() {
    let out = on_two_stacks(
        MemConfig::default(),
        |server_stack, client_stack| async move {
            let listener = TcpListener::from(server_stack.listen(7, 16).unwrap());
            let server = wirespeed_rt::spawn(async move {
                let mut total = 0usize;
                for _ in 0..3 {
                    total += echo_until_eof(listener.accept().await.unwrap()).await;
                }
                total
            });
            let mut echoed = 0;
            for round in 0..3u8 {
                let s = wirespeed_rt::timeout(
                    std::time::Duration::from_secs(10),
                    client_stack
                        .connect(SocketAddrV4::new(Ipv4Addr::new(198, 18, 30, 2), 7).into()),
                )
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "connect timed out\nclient {:?}\nserver {:?}",
                        client_stack.stats(),
                        server_stack.stats()
                    )
                })
                .unwrap();
                let mut s = TcpStream::from(s);
                let data: Vec<u8> = (0..300_000u32).map(|i| (i as u8) ^ round).collect();
                let back = echo_lockstep(&mut s, &data).await;
                let mut buf = [0u8; 16];
                s.shutdown_write().unwrap();
                let n = wirespeed_rt::timeout(std::time::Duration::from_secs(10), s.read(&mut buf))
                    .await
                    .expect("no FIN back")
                    .unwrap();
                assert_eq!(n, 0, "data after the echo");
                assert!(back == data, "round {round}: echo mismatch");
                echoed += back.len();
            }
            (echoed, server.await)
        },
    );
    assert_eq!(out, (900_000, 900_000));
}

/// Shard `queue` of 4 (Toeplitz under the default key, a 128-entry table spread over the
/// queues): every connection `BypassStack::connect` opens, end to end over the in-memory pair,
/// has a distinct source port whose replies hash to the shard's own queue.
#[test]
fn connect_picks_ports_that_hash_to_the_own_queue() {
    use wirespeed_net::bypass::socket::RxSteering;
    use wirespeed_nic::rss::{FourTuple, RssModel, DEFAULT_TOEPLITZ_KEY};
    let n = 4u32;
    let model = RssModel::Toeplitz {
        key: DEFAULT_TOEPLITZ_KEY.to_vec(),
        indirection: (0..128).map(|i| i % n).collect(),
    };
    for queue in 0..n {
        let client_cfg = StackConfig {
            rx_steering: Some(RxSteering {
                model: model.clone(),
                queues: vec![queue],
            }),
            ..cfg(1)
        };
        let ports = Runtime::builder()
            .cpus(vec![0])
            .engine(EngineKind::Epoll)
            .run(move || {
                let client_cfg = client_cfg.clone();
                async move {
                    let (a, b) = MemPair::lossless();
                    let server_stack = BypassStack::start(&cfg(2), a);
                    let client_stack = BypassStack::start(&client_cfg, b);
                    let listener = server_stack.listen(80, 64).unwrap();
                    let server = wirespeed_rt::spawn(async move {
                        let mut kept = Vec::new();
                        for _ in 0..16 {
                            kept.push(listener.accept().await.unwrap());
                        }
                        kept.len()
                    });
                    let mut ports = Vec::new();
                    let mut streams = Vec::new();
                    for _ in 0..16 {
                        let s = wirespeed_rt::timeout(
                            std::time::Duration::from_secs(10),
                            client_stack.connect(
                                SocketAddrV4::new(Ipv4Addr::new(198, 18, 30, 2), 80).into(),
                            ),
                        )
                        .await
                        .expect("connect timed out")
                        .unwrap();
                        ports.push(s.local_addr().unwrap().port());
                        streams.push(s);
                    }
                    assert_eq!(server.await, 16);
                    ports
                }
            })
            .unwrap()
            .into_iter()
            .flatten()
            .collect::<Vec<u16>>();
        assert_eq!(ports.len(), 16);
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 16, "ports are distinct: {ports:?}");
        for port in ports {
            let replies = FourTuple {
                src: Ipv4Addr::new(198, 18, 30, 2).into(),
                dst: Ipv4Addr::new(198, 18, 30, 1).into(),
                src_port: 80,
                dst_port: port,
            };
            assert_eq!(
                model.queue_for(&replies),
                Some(queue),
                "port {port} chosen for queue {queue} of {n}"
            );
        }
    }
}

/// A SYN from 198.18.30.1 to the stack at .2 port 7, its TCP checksum left partial (the
/// pseudo-header sum) as a sender with checksum offload leaves it.
fn partial_syn(src_port: u16) -> Vec<u8> {
    use wirespeed_testkit::frame::{
        eth, ip_packet_with, make_l4_checksum_partial_v4, IpHeader, Tcp, L4, SYN,
    };
    let (src, dst) = (Ipv4Addr::new(198, 18, 30, 1), Ipv4Addr::new(198, 18, 30, 2));
    let syn = L4::Tcp(Tcp {
        sport: src_port,
        dport: 7,
        flags: SYN,
        ..Tcp::default()
    });
    let h = IpHeader {
        ident: 1,
        ..IpHeader::default()
    };
    let p = ip_packet_with(src.into(), dst.into(), &syn, &h);
    let mut f = eth([0x02, 0, 0, 0, 0, 2], [0x02, 0, 0, 0, 0, 1], false, &p);
    make_l4_checksum_partial_v4(&mut f);
    f
}

/// Partial checksums on a stack that does not take them: dropped, and the cause told once
/// however many frames show it. On a stack that takes them: the SYN is answered.
#[test]
fn partial_checksums_are_told_once_where_not_taken_and_answered_where_taken() {
    use std::cell::Cell;
    use std::rc::Rc;
    use wirespeed_net::bypass::socket::DropCause;
    use wirespeed_nic::FrameIo;
    let out = Runtime::builder()
        .cpus(vec![0])
        .engine(EngineKind::Epoll)
        .run(|| async {
            let mut results = Vec::new();
            for accept in [false, true] {
                let (a, mut wire) = MemPair::lossless();
                let stack = BypassStack::start(
                    &StackConfig {
                        accept_partial_checksums: accept,
                        ..cfg(2)
                    },
                    a,
                );
                let _listener = stack.listen(7, 16).unwrap();
                let told = Rc::new(Cell::new(Vec::<DropCause>::new()));
                let sink = told.clone();
                stack.on_drop_cause(move |c| {
                    let mut v = sink.take();
                    v.push(c);
                    sink.set(v);
                });
                for port in 40_000..40_003u16 {
                    let syn = partial_syn(port);
                    assert!(wire.tx_frame(|buf| {
                        buf[..syn.len()].copy_from_slice(&syn);
                        syn.len()
                    }));
                    wire.flush();
                    wirespeed_rt::sleep(std::time::Duration::from_millis(20)).await;
                }
                let mut answers = 0;
                wire.rx_burst(64, |_| answers += 1);
                let s = stack.stats();
                results.push((
                    accept,
                    told.take(),
                    answers,
                    s.tcp_bad_checksum_partial,
                    s.tcp_rx_csum_partial,
                ));
            }
            results
        })
        .unwrap();
    assert_eq!(
        out[0],
        vec![
            (false, vec![DropCause::PartialChecksums], 0, 3, 0),
            (true, vec![], 3, 0, 3),
        ]
    );
    assert!(DropCause::PartialChecksums
        .explain("eth0")
        .contains("ethtool -K PEER tx off"));
}

/// `write_vectored` on the bypass stack sends every slice, in order.
#[test]
fn write_vectored_sends_every_slice() {
    let out = on_two_stacks(
        MemConfig::default(),
        |server_stack, client_stack| async move {
            let listener = TcpListener::from(server_stack.listen(9, 4).unwrap());
            let server = wirespeed_rt::spawn(async move {
                let mut conn = listener.accept().await.unwrap();
                let mut got = Vec::new();
                let mut buf = vec![0u8; 4096];
                loop {
                    let n = conn.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break got;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
            });
            let s = client_stack
                .connect(SocketAddrV4::new(Ipv4Addr::new(198, 18, 30, 2), 9).into())
                .await
                .unwrap();
            let mut s = TcpStream::from(s);
            let parts: [&[u8]; 4] = [b"head ", b"", b"body ", b"tail"];
            let slices: Vec<std::io::IoSlice> =
                parts.iter().map(|p| std::io::IoSlice::new(p)).collect();
            let n = s.write_vectored(&slices).await.unwrap();
            assert_eq!(n, 14, "all slices fit the send buffer");
            s.shutdown_write().unwrap();
            wirespeed_rt::timeout(std::time::Duration::from_secs(10), server)
                .await
                .expect("server read timed out")
        },
    );
    assert_eq!(out, b"head body tail".to_vec());
}

/// Ports that complete TCP checksums as a device with checksum offload does (AF_XDP TX
/// metadata): each stack sees `tx_checksum_offload` on its queue and leaves only the
/// pseudo-header sum, the port completes it, and the receiving stack, which takes no partial
/// checksum, accepts every segment. Were a stack to leave partial sums on a port that does not
/// complete them, every segment would count as a bad checksum and the connect would time out.
#[test]
fn echo_over_ports_that_complete_tcp_checksums() {
    let link = MemConfig {
        tx_checksum_offload: true,
        ..MemConfig::default()
    };
    let out = on_two_stacks(link, |server_stack, client_stack| async move {
        let listener = TcpListener::from(server_stack.listen(7, 16).unwrap());
        wirespeed_rt::spawn(async move { echo_until_eof(listener.accept().await.unwrap()).await });
        let s = wirespeed_rt::timeout(
            std::time::Duration::from_secs(5),
            client_stack.connect(SocketAddrV4::new(Ipv4Addr::new(198, 18, 30, 2), 7).into()),
        )
        .await
        .unwrap_or_else(|_| panic!("connect timed out: {:?}", server_stack.stats()))
        .unwrap();
        let mut s = TcpStream::from(s);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        assert!(echo_lockstep(&mut s, &data).await == data, "echo mismatch");
        (client_stack.stats(), server_stack.stats())
    });
    let (client, server) = &out;
    for st in [client, server] {
        assert_eq!(st.tcp_bad_checksum, 0, "{st:?}");
        assert_eq!(st.tcp_rx_csum_partial, 0, "{st:?}");
        assert!(st.tcp_segments_in > 20, "{st:?}");
    }
}
