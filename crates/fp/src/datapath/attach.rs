//! Where a loaded program runs: attached through BPF links at XDP (native, else generic) or
//! at TC ingress (tcx), the TC stage behind an XDP program, and the cleanup of a program left
//! attached without a link. Links are never pinned: when the daemon dies, the kernel closes
//! them and detaches the programs, and traffic keeps flowing through the slow path.

use std::os::fd::{AsFd, OwnedFd};

use serde::Serialize;

use crate::datapath::loader::Program;
use crate::error::{io, Error, Result};

/// Where a program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Hook {
    XdpNative,
    XdpGeneric,
    /// TC ingress through a tcx link.
    Tc,
}

/// An attachment through a BPF link: closing it detaches the program.
pub struct Attachment {
    link: OwnedFd,
    pub ifindex: u32,
    pub hook: Hook,
    /// The TC stage's tcx link, behind a program at XDP.
    tc_stage: Option<OwnedFd>,
    /// Why a program at XDP has no TC stage (the tcx attach failed): its partial-checksum
    /// frames then go to the kernel.
    pub tc_stage_error: Option<String>,
}

const BPF_XDP: u32 = 37; // enum bpf_attach_type
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

impl Attachment {
    /// Attaches `prog` at XDP on `ifindex`: native mode if the driver has it, else generic;
    /// then its TC stage, if it has one, at TC ingress behind it.
    /// A program bound to the device (Features::vlan_meta) attaches natively only.
    pub fn xdp(prog: &Program, ifindex: u32) -> Result<Attachment> {
        let mut att = if prog.features.vlan_meta {
            let link = Self::xdp_mode(prog.fd(), ifindex, XDP_FLAGS_DRV_MODE)
                .map_err(|err| Error::NativeXdpRefused { ifindex, err })?;
            Attachment {
                link,
                ifindex,
                hook: Hook::XdpNative,
                tc_stage: None,
                tc_stage_error: None,
            }
        } else {
            Self::xdp_fd(prog.fd(), ifindex)?
        };
        att.follow_tc_stage(prog)?;
        Ok(att)
    }

    /// Makes the TC stage behind this XDP attachment `prog`'s (attached, replaced or
    /// removed) and switches the marking in `prog` to match.
    fn follow_tc_stage(&mut self, prog: &Program) -> Result<()> {
        self.tc_stage_error = None;
        match (prog.tc_stage_fd(), &self.tc_stage) {
            (Some(stage), Some(link)) => {
                wirespeed_sys::bpf::link_update(link.as_fd(), stage).map_err(io(format!(
                    "bpf_link_update of the TC stage on ifindex {}",
                    self.ifindex
                )))?;
            }
            (Some(stage), None) => match Self::tc_fd(stage, self.ifindex) {
                Ok(tc) => self.tc_stage = Some(tc.link),
                Err(e) => self.tc_stage_error = Some(e.to_string()),
            },
            (None, _) => self.tc_stage = None,
        }
        prog.set_tc_stage(self.tc_stage.is_some())
    }

    /// Whether a TC stage runs behind this XDP attachment.
    pub fn has_tc_stage(&self) -> bool {
        self.tc_stage.is_some()
    }

    /// As `xdp`, for any loaded XDP program.
    pub fn xdp_fd(prog: std::os::fd::BorrowedFd<'_>, ifindex: u32) -> Result<Attachment> {
        match Self::xdp_mode(prog, ifindex, XDP_FLAGS_DRV_MODE) {
            Ok(link) => Ok(Attachment {
                link,
                ifindex,
                hook: Hook::XdpNative,
                tc_stage: None,
                tc_stage_error: None,
            }),
            Err(_) => {
                let link = Self::xdp_mode(prog, ifindex, XDP_FLAGS_SKB_MODE).map_err(io(
                    format!("attach XDP to ifindex {ifindex} (native and generic both refused)"),
                ))?;
                Ok(Attachment {
                    link,
                    ifindex,
                    hook: Hook::XdpGeneric,
                    tc_stage: None,
                    tc_stage_error: None,
                })
            }
        }
    }

    /// Attaches `prog` (an fp_tc program) at TC ingress on `ifindex` through a tcx link, in
    /// front of any classifier already there.
    pub fn tc(prog: &Program, ifindex: u32) -> Result<Attachment> {
        Self::tc_fd(prog.fd(), ifindex)
    }

    /// As `tc`, for any loaded TC program.
    pub fn tc_fd(prog: std::os::fd::BorrowedFd<'_>, ifindex: u32) -> Result<Attachment> {
        let link = wirespeed_sys::bpf::link_create(
            prog,
            ifindex,
            libbpf_rs::libbpf_sys::BPF_TCX_INGRESS,
            libbpf_rs::libbpf_sys::BPF_F_BEFORE,
        )
        .map_err(io(format!("attach TC ingress (tcx) to ifindex {ifindex}")))?;
        Ok(Attachment {
            link,
            ifindex,
            hook: Hook::Tc,
            tc_stage: None,
            tc_stage_error: None,
        })
    }

    fn xdp_mode(
        prog: std::os::fd::BorrowedFd<'_>,
        ifindex: u32,
        flags: u32,
    ) -> std::io::Result<OwnedFd> {
        wirespeed_sys::bpf::link_create(prog, ifindex, BPF_XDP, flags)
    }

    /// Swaps in a re-specialized program atomically: no packet sees no program. At XDP its
    /// TC stage follows (until then the old stage routes what the new program marks: both
    /// mark alike).
    pub fn replace(&mut self, prog: &Program) -> Result<()> {
        wirespeed_sys::bpf::link_update(self.link.as_fd(), prog.fd())
            .map_err(io(format!("bpf_link_update on ifindex {}", self.ifindex)))?;
        if self.hook != Hook::Tc {
            self.follow_tc_stage(prog)?;
        }
        Ok(())
    }
}

/// How many programs are attached at TC ingress (tcx) on `ifindex` in the calling thread's
/// namespace, ours or anyone's.
pub fn tcx_ingress_count(ifindex: u32) -> Result<u32> {
    wirespeed_sys::bpf::prog_count(ifindex, libbpf_rs::libbpf_sys::BPF_TCX_INGRESS).map_err(io(
        format!("query TC ingress programs of ifindex {ifindex}"),
    ))
}

/// How many programs are attached through tcx on `ifindex`, at ingress and at egress, ours
/// or anyone's.
pub fn tcx_counts(ifindex: u32) -> Result<(u32, u32)> {
    let egress = wirespeed_sys::bpf::prog_count(ifindex, libbpf_rs::libbpf_sys::BPF_TCX_EGRESS)
        .map_err(io(format!("query TC egress programs of ifindex {ifindex}")))?;
    Ok((tcx_ingress_count(ifindex)?, egress))
}

impl Attachment {
    /// How many tcx programs at ingress are ours here: the router or bridge at TC, or the TC
    /// stage behind XDP.
    pub fn own_tcx_ingress(&self) -> u32 {
        (self.hook == Hook::Tc || self.has_tc_stage()) as u32
    }
}

/// Detaches a non-link XDP program named like ours left on `ifindex` (e.g. by a tool that
/// attached our object by hand). Link-based attachments die with their owner and are never
/// stale. Returns true when one was removed.
pub fn remove_stale_xdp(ifindex: u32) -> bool {
    let Ok(q) = wirespeed_sys::bpf::xdp_query(ifindex) else {
        return false;
    };
    if q.prog_id == 0 {
        return false;
    }
    let Ok(fd) = libbpf_rs::Program::fd_from_id(q.prog_id) else {
        return false;
    };
    if wirespeed_sys::bpf::prog_name(fd.as_fd()).ok().as_deref() != Some(b"fp_xdp") {
        return false;
    }
    let mode_flags = match q.attach_mode as u32 {
        1 => XDP_FLAGS_DRV_MODE,
        2 => XDP_FLAGS_SKB_MODE,
        _ => 0,
    };
    // Fails harmlessly (EBUSY) if a link owns the attachment.
    wirespeed_sys::bpf::xdp_detach(ifindex, mode_flags).is_ok()
}
