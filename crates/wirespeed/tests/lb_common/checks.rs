//! Readers of what the product prints and the backends count, shared by the tests.

use std::process::{Command, Stdio};

use super::{bin, rip4, LbLab, BACKENDS};

/// Shares per backend against the weights' shares; asserts each within 5% of its own.
pub fn assert_spread(what: &str, counts: &[usize; BACKENDS], weights: &[u32; BACKENDS]) {
    let total: usize = counts.iter().sum();
    let wsum: u32 = weights.iter().sum();
    let mut worst = 0.0f64;
    let mut lines = vec![];
    for j in 0..BACKENDS {
        let want = f64::from(weights[j]) / f64::from(wsum);
        let got = counts[j] as f64 / total as f64;
        let off = (got - want).abs() / want;
        worst = worst.max(off);
        lines.push(format!(
            "b{j} w{} {} conns {:.2}% (want {:.2}%, off {:.1}%)",
            weights[j],
            counts[j],
            got * 100.0,
            want * 100.0,
            off * 100.0
        ));
    }
    println!("{what}: {total} connections: {}", lines.join("; "));
    assert!(
        worst <= 0.05,
        "{what}: a backend's share is {:.1}% off its weight's share",
        worst * 100.0
    );
}

/// redis's own count of accepted connections on backend `j` (INFO stats), read from the
/// backend's namespace; the reading connection itself counts one.
pub fn redis_accepted(lab: &LbLab, j: usize) -> usize {
    let out = lab.exec(
        &format!("b{j}"),
        "redis-cli",
        &["-h", &rip4(j).to_string(), "-p", "6379", "INFO", "stats"],
    );
    out.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in {out}"))
}

/// The health `-L -n --json` gives the real `real` (ADDR:PORT), lowercased: any JSON object
/// that names the real's address and has a `health` field.
pub fn health_of(lab: &LbLab, real: &str) -> Option<String> {
    let text = lab.lb_ok(&["-L", "-n", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&text).expect("-L --json");
    fn walk(v: &serde_json::Value, real: &str) -> Option<String> {
        match v {
            serde_json::Value::Object(m) => {
                let names = m.values().any(|x| x.as_str() == Some(real));
                if names {
                    if let Some(h) = m.get("health").and_then(|h| h.as_str()) {
                        return Some(h.to_lowercase());
                    }
                }
                m.values().find_map(|x| walk(x, real))
            }
            serde_json::Value::Array(a) => a.iter().find_map(|x| walk(x, real)),
            _ => None,
        }
    }
    walk(&v, real)
}

/// A number as ipvsadm prints it in `--stats` (with K/M/G scaling).
pub fn stat_number(s: &str) -> Option<u64> {
    let (n, mult) = match s.chars().last()? {
        'K' => (&s[..s.len() - 1], 1_000),
        'M' => (&s[..s.len() - 1], 1_000_000),
        'G' => (&s[..s.len() - 1], 1_000_000_000),
        _ => (s, 1),
    };
    n.parse::<u64>().ok().map(|v| v * mult)
}

pub fn lb_stdin(lab: &LbLab, args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", &lab.ns_name("lb"), bin(), "lb"])
        .args(args)
        .env("WIRESPEED_LB_SOCKET", &lab.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wirespeed lb");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// The XDP programs attached to the lb node's interfaces (`ip -d link` shows `prog/xdp`).
pub fn xdp_attached(lab: &LbLab) -> Vec<String> {
    lab.lb_ifaces()
        .into_iter()
        .filter(|i| {
            lab.exec("lb", "ip", &["-d", "link", "show", "dev", i])
                .contains("xdp")
        })
        .collect()
}

/// The fixing command of a doctor line: from the first `ip `, `sysctl ` or `modprobe `.
pub fn doctor_fix(line: &str) -> Option<&str> {
    ["ip netns exec ", "ip ", "sysctl ", "modprobe "]
        .iter()
        .filter_map(|p| line.find(p))
        .min()
        .map(|at| line[at..].trim_end_matches(['`', '\'', '"', '.', ')']))
}
