//! Echo load: each message is `size` bytes and comes back unchanged.

use crate::{Outcome, ParseError, Progress, ResponseParser};

/// Counts echoed bytes; every `size` bytes is one completed message.
#[derive(Clone, Debug)]
pub struct EchoParser {
    size: usize,
    got: usize,
}

impl EchoParser {
    pub fn new(size: usize) -> EchoParser {
        EchoParser {
            size: size.max(1),
            got: 0,
        }
    }
}

impl ResponseParser for EchoParser {
    fn advance(&mut self, buf: &[u8]) -> Result<Progress, ParseError> {
        let take = buf.len().min(self.size - self.got);
        self.got += take;
        if self.got == self.size {
            self.got = 0;
            Ok(Progress {
                consumed: take,
                done: Some(Outcome::Ok),
            })
        } else {
            Ok(Progress {
                consumed: take,
                done: None,
            })
        }
    }

    fn reset(&mut self) {
        self.got = 0;
    }
}

/// The message every connection sends: `size` bytes of a repeating pattern.
pub fn message(size: usize) -> Vec<u8> {
    (0..size.max(1)).map(|i| b'a' + (i % 26) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_messages_across_splits() {
        let mut p = EchoParser::new(4);
        let r = p.advance(b"abc").unwrap();
        assert_eq!(
            r,
            Progress {
                consumed: 3,
                done: None
            }
        );
        let r = p.advance(b"defgh").unwrap();
        assert_eq!(
            r,
            Progress {
                consumed: 1,
                done: Some(Outcome::Ok)
            }
        );
        let r = p.advance(b"efgh").unwrap();
        assert_eq!(
            r,
            Progress {
                consumed: 4,
                done: Some(Outcome::Ok)
            }
        );
        assert_eq!(message(3), b"abc");
    }
}
