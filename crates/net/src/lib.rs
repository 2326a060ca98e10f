//! wirespeed-net (being built).
