//! wirespeed-http (being built).
