//! The process and its threads: privileges, signalling other processes, CPU affinity, resource
//! usage, the clock tick, and advisory file locks.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::signal::Signal;

/// True when the process runs with effective user id 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = pid_t(pid)?;
    // SAFETY: kill(2) takes no pointers; a positive pid names one process.
    if unsafe { libc::kill(pid, signal.raw()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// True while process `pid` exists (a zombie still counts), whoever owns it.
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = pid_t(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    // EPERM: it exists but belongs to someone else.
    io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn pid_t(pid: u32) -> io::Result<libc::pid_t> {
    // 0 and negative values address process groups, never one process.
    match libc::pid_t::try_from(pid) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        )),
    }
}

/// The number of CPUs a `cpu_set_t` can name.
pub const MAX_CPUS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

/// Restricts the calling thread to the CPUs in `cpus`.
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= MAX_CPUS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cpu {cpu} out of range (at most {})", MAX_CPUS - 1),
            ));
        }
        // SAFETY: `cpu` is below the set's capacity, checked just above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a live cpu_set_t and the size passed is its size; pid 0 is this thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs process or thread `pid` may run on (0: the calling thread), in ascending order.
pub fn affinity(pid: u32) -> io::Result<Vec<usize>> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{pid} is not a process id"),
        )
    })?;
    // SAFETY: cpu_set_t is plain data, for which all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most the size passed, which is the size of `set`.
    if unsafe { libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
        != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: every index is below the set's capacity.
    Ok((0..MAX_CPUS)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> usize {
    // SAFETY: sched_getcpu takes no arguments; it returns -1 only where unsupported.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as usize
}

/// What getrusage(2) reports for the whole process (all threads), so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub user: Duration,
    pub system: Duration,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

impl Usage {
    /// User plus system time.
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }
}

/// The resource usage of this process (all its threads) so far.
pub fn rusage() -> Usage {
    // SAFETY: rusage is plain data, for which all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the live struct; with RUSAGE_SELF it cannot fail.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        voluntary_switches: ru.ru_nvcsw as u64,
        involuntary_switches: ru.ru_nivcsw as u64,
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
    }
}

/// CPU time the calling thread has used so far (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one live timespec; this clock always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Clock ticks per second (`_SC_CLK_TCK`), the unit of CPU times in /proc; 100 when the
/// system does not say.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf takes no pointers.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Takes an exclusive advisory lock (flock(2)) on `file`, waiting for other holders. The lock
/// is released when every descriptor of the open file is closed.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    // SAFETY: flock takes no pointers; `file` keeps the descriptor open during the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Raises this process's soft limit on open files to `want`, or to the hard limit if that is
/// lower; returns the soft limit now in force.
pub fn raise_open_files(want: u64) -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if r.rlim_cur >= want {
        return Ok(r.rlim_cur);
    }
    r.rlim_cur = want.min(r.rlim_max);
    // SAFETY: setrlimit reads the struct it is given.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_pid_zero_is_refused() {
        assert!(alive(std::process::id()));
        assert!(!alive(0));
        assert!(kill(0, Signal::Terminate).is_err());
    }

    #[test]
    fn a_signalled_child_ends() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // SIGTERM: a job started in the background by a non-interactive shell inherits
        // SIGINT ignored, and so would this child.
        kill(child.id(), Signal::Terminate).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(!alive(child.id()));
    }

    #[test]
    fn affinity_round_trips_on_a_fresh_thread() {
        std::thread::spawn(|| {
            let allowed = affinity(0).unwrap();
            assert!(!allowed.is_empty());
            set_affinity(&allowed[..1]).unwrap();
            assert_eq!(affinity(0).unwrap(), allowed[..1]);
            assert_eq!(current_cpu(), allowed[0]);
            assert!(set_affinity(&[MAX_CPUS]).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn usage_and_ticks_are_sane() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(20) {}
        assert!(rusage().cpu() > Duration::ZERO);
        assert!(clock_ticks() > 0);
    }

    #[test]
    fn a_lock_is_exclusive_across_open_files() {
        let path = std::env::temp_dir().join(format!("ws-sys-lock-{}", std::process::id()));
        let a = File::create(&path).unwrap();
        lock_exclusive(&a).unwrap();
        let b = File::open(&path).unwrap();
        // A second open file of the same path waits until the first lets go.
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            lock_exclusive(&b).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        drop(a);
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        t.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
