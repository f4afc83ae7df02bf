//! CQL native protocol framing: the 9-byte header shared by protocol v3 and v4, and a cursor for
//! reading the protocol's primitive types out of a frame body.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Length of a v3/v4 frame header: version, flags, stream (2), opcode, body length (4).
pub const HEADER_LEN: usize = 9;
/// Largest body the bridge accepts (the protocol's own limit is 256 MiB).
pub const MAX_BODY_LEN: usize = 256 * 1024 * 1024;

/// Bit of the version byte that marks a response (server → client).
pub const RESPONSE_BIT: u8 = 0x80;
/// Header flag: the body is compressed (the bridge does not support compression).
pub const FLAG_COMPRESSION: u8 = 0x01;
/// Header flag: a response body starts with a 16-byte tracing session id.
pub const FLAG_TRACING: u8 = 0x02;

/// Request and response opcodes the bridge looks inside.
pub mod opcode {
    /// STARTUP request: a string map of options.
    pub const STARTUP: u8 = 0x01;
    /// QUERY request: a long string followed by query parameters.
    pub const QUERY: u8 = 0x07;
    /// RESULT response.
    pub const RESULT: u8 = 0x08;
    /// PREPARE request: a long string.
    pub const PREPARE: u8 = 0x09;
    /// EXECUTE request: the prepared id as short bytes, then query parameters.
    pub const EXECUTE: u8 = 0x0A;
}

/// Errors from decoding a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The socket failed or closed in the middle of a frame.
    #[error("i/o error while reading a frame: {0}")]
    Io(#[from] std::io::Error),
    /// The header announced a body larger than [`MAX_BODY_LEN`].
    #[error("frame body of {0} bytes exceeds the {MAX_BODY_LEN}-byte limit")]
    TooLarge(usize),
    /// The body does not hold what its opcode says it holds.
    #[error("malformed frame body: {0}")]
    Malformed(&'static str),
}

/// One frame: its header fields and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Protocol version byte, including [`RESPONSE_BIT`] for responses.
    pub version: u8,
    /// Header flags.
    pub flags: u8,
    /// Stream id that pairs a response with its request (negative for server events).
    pub stream: i16,
    /// Message opcode.
    pub opcode: u8,
    /// Message body.
    pub body: Vec<u8>,
}

impl Frame {
    /// Reads one frame; `Ok(None)` when the peer closed the connection between frames.
    pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, FrameError> {
        let mut header = [0u8; HEADER_LEN];
        match reader.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let length = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) as usize;
        if length > MAX_BODY_LEN {
            return Err(FrameError::TooLarge(length));
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).await?;
        Ok(Some(Frame {
            version: header[0],
            flags: header[1],
            stream: i16::from_be_bytes([header[2], header[3]]),
            opcode: header[4],
            body,
        }))
    }

    /// Encodes the frame, header and body, ready to be written to a socket.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.body.len());
        out.push(self.version);
        out.push(self.flags);
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.push(self.opcode);
        out.extend_from_slice(&(self.body.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.body);
        out
    }
}

/// A cursor over a frame body that reads the protocol's primitive types.
#[derive(Debug)]
pub struct BodyReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> BodyReader<'a> {
    /// A reader positioned at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        BodyReader { buf, pos: 0 }
    }

    /// Current offset into the body.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes read since offset `start` (a value from [`BodyReader::position`]).
    pub fn since(&self, start: usize) -> &'a [u8] {
        &self.buf[start.min(self.pos)..self.pos]
    }

    /// Everything not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.buf.len())
            .ok_or(FrameError::Malformed("body ends early"))?;
        let slice = &self.buf[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    /// `[int]`: a signed 32-bit big-endian integer.
    pub fn int(&mut self) -> Result<i32, FrameError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// `[short]`: an unsigned 16-bit big-endian integer.
    pub fn short(&mut self) -> Result<u16, FrameError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// `[string]`: a short length followed by UTF-8 bytes.
    pub fn string(&mut self) -> Result<&'a str, FrameError> {
        let len = self.short()? as usize;
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| FrameError::Malformed("string is not UTF-8"))
    }

    /// `[long string]`: an int length followed by UTF-8 bytes.
    pub fn long_string(&mut self) -> Result<&'a str, FrameError> {
        let len = usize::try_from(self.int()?)
            .map_err(|_| FrameError::Malformed("negative long string length"))?;
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| FrameError::Malformed("long string is not UTF-8"))
    }

    /// `[short bytes]`: a short length followed by bytes.
    pub fn short_bytes(&mut self) -> Result<&'a [u8], FrameError> {
        let len = self.short()? as usize;
        self.take(len)
    }

    /// `[bytes]`: an int length followed by bytes; a negative length is null and yields `None`.
    pub fn bytes(&mut self) -> Result<Option<&'a [u8]>, FrameError> {
        let len = self.int()?;
        if len < 0 {
            return Ok(None);
        }
        self.take(len as usize).map(Some)
    }

    /// Skips an `[option]` describing a column type, including nested collection, UDT and tuple types.
    pub fn skip_type_option(&mut self) -> Result<(), FrameError> {
        match self.short()? {
            // custom type: the Java class name
            0x0000 => {
                self.string()?;
            }
            // list, set: element type
            0x0020 | 0x0022 => self.skip_type_option()?,
            // map: key and value types
            0x0021 => {
                self.skip_type_option()?;
                self.skip_type_option()?;
            }
            // user-defined type: keyspace, name, then (field name, field type) pairs
            0x0030 => {
                self.string()?;
                self.string()?;
                for _ in 0..self.short()? {
                    self.string()?;
                    self.skip_type_option()?;
                }
            }
            // tuple: element types
            0x0031 => {
                for _ in 0..self.short()? {
                    self.skip_type_option()?;
                }
            }
            // native types carry no extra value
            _ => {}
        }
        Ok(())
    }
}

/// Appends a `[string]`.
pub fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends a `[long string]`.
pub fn put_long_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Appends an `[int]`.
pub fn put_int(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frame_round_trips_through_encode_and_read() {
        let frame = Frame {
            version: 0x84,
            flags: FLAG_TRACING,
            stream: -1,
            opcode: opcode::RESULT,
            body: vec![1, 2, 3],
        };
        let bytes = frame.encode();
        assert_eq!(bytes.len(), HEADER_LEN + 3);
        let decoded = Frame::read(&mut bytes.as_slice()).await.unwrap();
        assert_eq!(decoded, Some(frame));
    }

    #[tokio::test]
    async fn clean_close_between_frames_is_not_an_error() {
        let empty: &[u8] = &[];
        assert_eq!(Frame::read(&mut &*empty).await.unwrap(), None);
    }

    #[tokio::test]
    async fn oversized_body_is_refused() {
        let mut header = vec![0x04, 0, 0, 1, opcode::QUERY];
        header.extend_from_slice(&u32::MAX.to_be_bytes());
        let err = Frame::read(&mut header.as_slice()).await.unwrap_err();
        assert!(matches!(err, FrameError::TooLarge(_)), "{err}");
    }

    #[test]
    fn reader_refuses_to_read_past_the_end() {
        let mut r = BodyReader::new(&[0, 5, b'a']);
        assert!(matches!(r.string(), Err(FrameError::Malformed(_))));
    }

    #[test]
    fn skip_type_option_walks_nested_types() {
        // map<text, frozen<tuple<int, list<inet>>>> followed by a marker byte
        let mut body = vec![
            0x00, 0x21, 0x00, 0x0D, 0x00, 0x31, 0x00, 0x02, 0x00, 0x09, 0x00, 0x20, 0x00, 0x10,
        ];
        body.push(0xAB);
        let mut r = BodyReader::new(&body);
        r.skip_type_option().unwrap();
        assert_eq!(r.rest(), &[0xAB]);
    }
}
