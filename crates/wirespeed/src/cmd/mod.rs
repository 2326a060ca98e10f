pub mod bench;
pub mod fp;
pub mod lab;
pub mod probe;
pub mod serve;
pub mod showdown;
