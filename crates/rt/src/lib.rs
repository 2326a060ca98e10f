//! wirespeed-rt (being built).
