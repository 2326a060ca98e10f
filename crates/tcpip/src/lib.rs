//! wirespeed-tcpip (being built).
