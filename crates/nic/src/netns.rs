//! Which network namespace the calling thread is in, to keep XDP attachments inside the lab.
//! The guard itself lives in `wirespeed-sys`, shared with the fast path's daemon.

pub(crate) use wirespeed_sys::netns::current_lab_namespace;
