//! The interface ioctls on an AF_INET control socket: MTU, hardware address, whether it runs,
//! and SIOCETHTOOL.
//! The device is looked up in the calling thread's network namespace; an unknown or invalid
//! name is ENODEV.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const SIOCETHTOOL: libc::c_ulong = 0x8946;

fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); owned at once.
    let fd = crate::cvt(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(ifname: &str) -> io::Result<libc::ifreq> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from_raw_os_error(libc::ENODEV));
    }
    // SAFETY: all-zero is a valid ifreq (integers, arrays and a union of them).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(ifr)
}

fn ioctl(request: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    let sock = control_socket()?;
    // SAFETY: ifr is a valid ifreq naming the device; any buffer it points at outlives the
    // call (the callers' contract).
    crate::cvt(unsafe { libc::ioctl(sock.as_raw_fd(), request as _, ifr as *mut libc::ifreq) })?;
    Ok(())
}

/// The device's MTU (SIOCGIFMTU).
pub fn mtu(ifname: &str) -> io::Result<u32> {
    let mut ifr = ifreq(ifname)?;
    ioctl(libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu }.max(0) as u32)
}

/// The device's hardware address (SIOCGIFHWADDR), its first 6 bytes.
pub fn mac(ifname: &str) -> io::Result<[u8; 6]> {
    let mut ifr = ifreq(ifname)?;
    ioctl(libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (m, b) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *m = *b as u8;
    }
    Ok(mac)
}

/// SIOCETHTOOL on `ifname` with `buf`, whose first u32 is the command. The kernel writes
/// the command's whole answer into `buf`, so every caller sizes it for its command (u32
/// words, so it is aligned for the kernel's structs); that is why this stays in the crate.
pub(crate) fn ethtool(ifname: &str, buf: &mut [u32]) -> io::Result<()> {
    let mut ifr = ifreq(ifname)?;
    ifr.ifr_ifru.ifru_data = buf.as_mut_ptr().cast();
    ioctl(SIOCETHTOOL, &mut ifr)
}

/// The device's current rx and combined channel counts (`ethtool -l`, ETHTOOL_GCHANNELS).
pub fn channels(ifname: &str) -> io::Result<(u32, u32)> {
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    // struct ethtool_channels { cmd, max_rx, max_tx, max_other, max_combined, rx_count,
    // tx_count, other_count, combined_count }
    let mut ch = [0u32; 9];
    ch[0] = ETHTOOL_GCHANNELS;
    ethtool(ifname, &mut ch)?;
    Ok((ch[5], ch[8]))
}

/// The device's driver name (`ethtool -i`, ETHTOOL_GDRVINFO).
pub fn driver(ifname: &str) -> io::Result<String> {
    const ETHTOOL_GDRVINFO: u32 = 0x3;
    // struct ethtool_drvinfo { cmd, char driver[32], ... }: 196 bytes.
    let mut info = [0u32; 49];
    info[0] = ETHTOOL_GDRVINFO;
    ethtool(ifname, &mut info)?;
    let driver: Vec<u8> = info[1..9].iter().flat_map(|w| w.to_ne_bytes()).collect();
    let end = driver.iter().position(|&b| b == 0).unwrap_or(driver.len());
    Ok(String::from_utf8_lossy(&driver[..end]).into_owned())
}

/// The device's RSS configuration (`ethtool -x`, ETHTOOL_GRSSH): the filled `struct
/// ethtool_rxfh` as bytes (a 24-byte header with the sizes, then `indir_size` u32s, then
/// `key_size` key bytes).
pub fn rxfh(ifname: &str) -> io::Result<Vec<u8>> {
    const ETHTOOL_GRSSH: u32 = 0x46;
    const HEADER: usize = 24;
    // First call: sizes only.
    let mut head = [0u32; HEADER / 4];
    head[0] = ETHTOOL_GRSSH;
    ethtool(ifname, &mut head)?;
    let (indir_size, key_size) = (head[2] as usize, head[3] as usize);
    if indir_size > 1 << 16 || key_size > 1 << 10 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("implausible RSS sizes {indir_size}/{key_size}"),
        ));
    }
    let mut buf = vec![0u32; (HEADER + indir_size * 4 + key_size).div_ceil(4)];
    buf[0] = ETHTOOL_GRSSH;
    buf[2] = indir_size as u32;
    buf[3] = key_size as u32;
    ethtool(ifname, &mut buf)?;
    Ok(buf.iter().flat_map(|w| w.to_ne_bytes()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_has_a_zero_mac_and_a_large_mtu_and_unknown_names_are_enodev() {
        assert_eq!(mac("lo").unwrap(), [0; 6]);
        assert!(mtu("lo").unwrap() >= 1500);
        assert_eq!(
            driver("lo").unwrap_err().raw_os_error(),
            Some(libc::EOPNOTSUPP)
        );
        for name in ["", "ws-none-such", "a-name-far-too-long-for-ifnamsiz"] {
            assert_eq!(
                mtu(name).unwrap_err().raw_os_error(),
                Some(libc::ENODEV),
                "{name}"
            );
        }
    }
}
