//! wirespeed-fp (being built).
