//! wirespeed-nic (being built).
