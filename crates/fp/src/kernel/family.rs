//! The address families as rtnetlink messages number them (rtmsg, fib_rule_hdr, ndmsg, ifaddrmsg).

/// IPv4 (AF_INET).
pub const AF_INET: u8 = libc::AF_INET as u8;
/// IPv6 (AF_INET6).
pub const AF_INET6: u8 = libc::AF_INET6 as u8;
