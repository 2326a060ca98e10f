//! wirespeed-bench (being built).
