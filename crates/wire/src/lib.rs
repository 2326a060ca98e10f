//! wirespeed-wire (being built).
