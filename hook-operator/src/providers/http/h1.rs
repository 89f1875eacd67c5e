//! The HTTP/1.1 answer as the plain-HTTP path ([`super::connections`]) reads it: the head parsed by `httparse`
//! (bounded: at most [`MAX_HEADERS`] fields and [`MAX_HEAD`] bytes), then the body framed by `Content-Length`,
//! chunked transfer coding or the end of the connection (RFC 9112 §6). Pure functions over bytes, so the split
//! reads a socket produces are tested (and fuzzed: `fuzz::answer`) without one.

/// Header fields an answer may have.
pub const MAX_HEADERS: usize = 64;
/// The longest answer head, and the longest chunk-size line or trailer section.
pub const MAX_HEAD: usize = 64 * 1024;

/// How the body of an answer ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (a HEAD request, 1xx, 204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
}

/// The head of a final answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// `Location`, kept for redirections only (3xx) and only when it is visible ASCII.
    pub location: Option<String>,
    /// How the body ends.
    pub framing: Framing,
    /// The connection may carry another request once this answer's body was read.
    pub keep_alive: bool,
}

/// Whether the bytes of `buf` from `from` on (with the few before them) may end a head (an empty line): a head that
/// was incomplete before is parsed again only then, so a head arriving a byte at a time is not parsed once per byte.
pub fn may_end_head(buf: &[u8], from: usize) -> bool {
    let start = from.saturating_sub(2).min(buf.len());
    buf[start..]
        .iter()
        .enumerate()
        .any(|(i, b)| *b == b'\n' && matches!(&buf[start + i + 1..], [b'\n', ..] | [b'\r', b'\n', ..]))
}

/// What the bytes so far hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// An interim (1xx) answer of this many bytes, to be skipped.
    Interim(usize),
    /// A final answer's head and its length in bytes.
    Complete(Head, usize),
}

/// Parses the head at the start of `buf`. `head_request`: the request was a HEAD (no body follows, whatever the
/// head announces).
pub fn parse_head(buf: &[u8], head_request: bool) -> Result<Parsed, String> {
    let too_long = || format!("the answer's head is longer than {} KiB", MAX_HEAD / 1024);
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    // Only the first MAX_HEAD bytes are looked at, so the verdict on a long head does not depend on how much of it
    // was read when it was parsed.
    let length = match response.parse(&buf[..buf.len().min(MAX_HEAD)]) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(too_long()),
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!("the answer has more than {MAX_HEADERS} header fields"));
        }
        Err(e) => return Err(format!("not an HTTP/1.x answer ({e})")),
    };
    let status = response.code.unwrap_or_default();
    if (100..200).contains(&status) && status != 101 {
        return Ok(Parsed::Interim(length));
    }
    let (mut chunked, mut encoded, mut close, mut keep) = (false, false, false, false);
    let mut announced: Option<u64> = None;
    let mut location = None;
    for field in response.headers.iter() {
        let name = field.name;
        if name.eq_ignore_ascii_case("transfer-encoding") {
            encoded = true;
            // Chunked only when it is the last coding applied (RFC 9112 §6.3).
            let last = field.value.rsplit(|b| *b == b',').next().unwrap_or_default();
            chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            // `5` or a list of the same value (`5, 5`); anything else is an error (a smuggling attempt).
            for value in field.value.split(|b| *b == b',') {
                let value = value.trim_ascii();
                let parsed = (!value.is_empty() && value.len() <= 19 && value.iter().all(u8::is_ascii_digit))
                    .then(|| value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
                    .ok_or_else(|| format!("invalid Content-Length {:?}", String::from_utf8_lossy(field.value)))?;
                if announced.is_some_and(|a| a != parsed) {
                    return Err("conflicting Content-Length values".to_string());
                }
                announced = Some(parsed);
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for token in field.value.split(|b| *b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("location") && (300..400).contains(&status) {
            location = std::str::from_utf8(field.value)
                .ok()
                .filter(|l| l.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
                .map(str::to_string);
        }
    }
    // HTTP/1.0 keeps the connection only when asked to, HTTP/1.1 unless told to close.
    let mut keep_alive = !close && (response.version == Some(1) || keep);
    let framing = if head_request || status == 101 || status == 204 || status == 304 {
        keep_alive &= status != 101;
        Framing::Empty
    } else if encoded {
        // Transfer-Encoding wins over Content-Length, and a connection that sent both is not trusted again.
        keep_alive &= chunked && announced.is_none();
        if chunked { Framing::Chunked } else { Framing::UntilClose }
    } else if let Some(length) = announced {
        Framing::Length(length)
    } else {
        keep_alive = false;
        Framing::UntilClose
    };
    Ok(Parsed::Complete(Head { status, location, framing, keep_alive }, length))
}

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// More than the limit given to [`Body::decode`].
    TooLarge,
    /// The framing is broken (a bad chunk-size line, a missing CRLF), with what was wrong.
    Invalid(String),
}

/// Where in a chunked body the decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// Reading a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: the trailer section, up to its empty line.
    Trailers,
}

/// A body being decoded, fed the bytes as they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// A `Content-Length` body, this many bytes left.
    Length(u64),
    /// A chunked body, at this point.
    Chunked(Chunk),
    /// Everything until the server closes the connection.
    UntilClose,
    /// The body is complete.
    Done,
}

impl Body {
    /// The decoder for a body framed as `framing` (already done for an empty one).
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::Empty | Framing::Length(0) => Body::Done,
            Framing::Length(length) => Body::Length(length),
            Framing::Chunked => Body::Chunked(Chunk::Size),
            Framing::UntilClose => Body::UntilClose,
        }
    }

    /// The body is complete: the connection may carry the next request (when the head allows it).
    pub fn is_done(&self) -> bool {
        *self == Body::Done
    }

    /// Decodes what it can of `input` into `out` (which may hold at most `limit` bytes); returns how many bytes of
    /// `input` it consumed. The rest (an incomplete chunk-size line or trailer section) is to be offered again with
    /// more bytes after it.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<usize, BodyError> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match *self {
                Body::Done => return Ok(used),
                Body::UntilClose => {
                    take_part(out, rest, u64::MAX, limit)?;
                    return Ok(input.len());
                }
                Body::Length(left) => {
                    let (taken, left) = take_part(out, rest, left, limit)?;
                    used += taken;
                    if left > 0 {
                        *self = Body::Length(left);
                        return Ok(used);
                    }
                    *self = Body::Done;
                }
                Body::Chunked(Chunk::Size) => {
                    // httparse takes an empty line for a size of 0; a size line starts with a digit.
                    if rest.first().is_some_and(|b| !b.is_ascii_hexdigit()) {
                        return Err(BodyError::Invalid("invalid chunk size line".to_string()));
                    }
                    // As for heads: only the first MAX_HEAD bytes are looked at.
                    match httparse::parse_chunk_size(&rest[..rest.len().min(MAX_HEAD)]) {
                        Ok(httparse::Status::Complete((length, size))) => {
                            used += length;
                            *self = Body::Chunked(if size == 0 { Chunk::Trailers } else { Chunk::Data(size) });
                        }
                        Ok(httparse::Status::Partial) if rest.len() >= MAX_HEAD => {
                            return Err(BodyError::Invalid(long_size_line()));
                        }
                        Ok(httparse::Status::Partial) => return Ok(used),
                        Err(_) => return Err(BodyError::Invalid("invalid chunk size line".to_string())),
                    }
                }
                Body::Chunked(Chunk::Data(left)) => {
                    if u64::try_from(out.len()).unwrap_or(u64::MAX).saturating_add(left) > limit as u64 {
                        // Announced beyond the limit: no need to read it first.
                        return Err(BodyError::TooLarge);
                    }
                    let (taken, left) = take_part(out, rest, left, limit)?;
                    used += taken;
                    if left > 0 {
                        *self = Body::Chunked(Chunk::Data(left));
                        return Ok(used);
                    }
                    *self = Body::Chunked(Chunk::DataEnd);
                }
                Body::Chunked(Chunk::DataEnd) => match rest {
                    [b'\r', b'\n', ..] => {
                        used += 2;
                        *self = Body::Chunked(Chunk::Size);
                    }
                    [] | [b'\r'] => return Ok(used),
                    _ => return Err(BodyError::Invalid("a chunk's data is not followed by CRLF".to_string())),
                },
                Body::Chunked(Chunk::Trailers) => {
                    // No trailer fields (CRLF), or fields up to an empty line; they are not used.
                    let end = match rest {
                        [b'\r', b'\n', ..] => Some(2),
                        [] | [b'\r'] => None,
                        _ => {
                            rest[..rest.len().min(MAX_HEAD)].windows(4).position(|w| w == b"\r\n\r\n").map(|at| at + 4)
                        }
                    };
                    match end {
                        Some(end) => {
                            used += end;
                            *self = Body::Done;
                        }
                        None if rest.len() >= MAX_HEAD => return Err(BodyError::Invalid(long_trailers())),
                        None => return Ok(used),
                    }
                }
            }
        }
    }

    /// The connection ended: the body is complete only when it runs until the close.
    pub fn end(&mut self) -> Result<(), BodyError> {
        match self {
            Body::Done => Ok(()),
            Body::UntilClose => {
                *self = Body::Done;
                Ok(())
            }
            _ => Err(BodyError::Invalid("the connection closed before the body ended".to_string())),
        }
    }
}

/// Moves up to `left` bytes of `rest` into `out`, which may hold at most `limit` bytes: how many it moved and how
/// many of the `left` remain.
fn take_part(out: &mut Vec<u8>, rest: &[u8], left: u64, limit: usize) -> Result<(usize, u64), BodyError> {
    let take = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
    if out.len() + take > limit {
        return Err(BodyError::TooLarge);
    }
    out.extend_from_slice(&rest[..take]);
    Ok((take, left - take as u64))
}

fn long_size_line() -> String {
    format!("a chunk size line longer than {} KiB", MAX_HEAD / 1024)
}

fn long_trailers() -> String {
    format!("trailer fields longer than {} KiB", MAX_HEAD / 1024)
}

/// A whole answer in `bytes` as it would be read in pieces of the given sizes (cycled): the status and body of the
/// final answer, or why not. For tests and the fuzzer: whatever the split, the outcome must be the same.
pub fn read_answer(bytes: &[u8], pieces: &[usize], head_request: bool, limit: usize) -> Result<(u16, Vec<u8>), String> {
    let mut available = 0;
    let mut sizes = pieces.iter().copied().filter(|s| *s > 0).cycle();
    let mut more = |available: &mut usize| {
        let before = *available;
        *available = (*available + sizes.next().unwrap_or(bytes.len())).min(bytes.len());
        *available > before
    };
    let mut start = 0;
    // As the connection parses: the first bytes, then only when an empty line may have arrived.
    let mut parsed_upto = None;
    let head = loop {
        let unread = &bytes[start..available];
        let parsed = match parsed_upto {
            Some(upto) if unread.len() < MAX_HEAD && !may_end_head(unread, upto) => Parsed::Partial,
            _ => parse_head(unread, head_request)?,
        };
        match parsed {
            Parsed::Complete(head, length) => {
                start += length;
                break head;
            }
            Parsed::Interim(length) => {
                start += length;
                parsed_upto = None;
            }
            Parsed::Partial => {
                parsed_upto = Some(unread.len());
                if !more(&mut available) {
                    // What the bytes that came are, if they say (a head that is not HTTP).
                    parse_head(unread, head_request)?;
                    return Err("the connection closed before an answer".to_string());
                }
            }
        }
    };
    let mut body = Body::new(head.framing);
    let mut out = Vec::new();
    let describe = |e: BodyError| match e {
        BodyError::TooLarge => format!("the body exceeds the {limit} byte limit"),
        BodyError::Invalid(why) => why,
    };
    loop {
        start += body.decode(&bytes[start..available], &mut out, limit).map_err(describe)?;
        if body.is_done() {
            return Ok((head.status, out));
        }
        if !more(&mut available) {
            body.end().map_err(describe)?;
            return Ok((head.status, out));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(text: &str) -> (Head, usize) {
        match parse_head(text.as_bytes(), false).unwrap() {
            Parsed::Complete(head, length) => (head, length),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn heads_say_how_the_body_ends_and_whether_the_connection_stays() {
        let (head, length) = complete("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!((head.status, head.framing, head.keep_alive, length), (200, Framing::Length(5), true, 38));
        let head = complete("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 5\r\n\r\n").0;
        assert_eq!((head.framing, head.keep_alive), (Framing::Length(5), false));
        // HTTP/1.0: kept only when asked.
        assert!(!complete("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n").0.keep_alive);
        assert!(complete("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\n").0.keep_alive);
        // Without a length the body runs until the close, and the connection cannot be kept.
        let head = complete("HTTP/1.1 200 OK\r\n\r\n").0;
        assert_eq!((head.framing, head.keep_alive), (Framing::UntilClose, false));
        let head = complete("HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n").0;
        assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, true));
        let head = complete("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n").0;
        assert_eq!((head.framing, head.keep_alive), (Framing::UntilClose, false));
        // Both: chunked wins, the connection is not trusted again.
        let head = complete("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n").0;
        assert_eq!((head.framing, head.keep_alive), (Framing::Chunked, false));
        for empty in ["HTTP/1.1 204 No Content\r\ncontent-length: 7\r\n\r\n", "HTTP/1.1 304 Not Modified\r\n\r\n"] {
            let head = complete(empty).0;
            assert_eq!((head.framing, head.keep_alive), (Framing::Empty, true), "{empty}");
        }
        let head = match parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", true).unwrap() {
            Parsed::Complete(head, _) => head,
            other => panic!("{other:?}"),
        };
        assert_eq!(head.framing, Framing::Empty, "the answer to a HEAD has no body");
        assert_eq!(complete("HTTP/1.1 302 Found\r\nLocation: /next\r\n\r\n").0.location.as_deref(), Some("/next"));
        assert_eq!(complete("HTTP/1.1 200 OK\r\nLocation: /next\r\n\r\n").0.location, None);
        assert_eq!(complete("HTTP/1.1 200 OK\r\ncontent-length: 4, 4\r\n\r\n").0.framing, Framing::Length(4));
    }

    #[test]
    fn a_partial_head_is_parsed_again_only_when_an_empty_line_may_have_come() {
        let head = b"HTTP/1.1 200 OK\r\nx: y\r\n\r\n";
        assert_eq!(head.len(), 25);
        assert!(!may_end_head(&head[..20], 0));
        assert!(!may_end_head(&head[..23], 17), "a line end is not a head end");
        assert!(!may_end_head(&head[..24], 17), "not yet");
        assert!(may_end_head(head, 23));
        assert!(may_end_head(head, 24), "the empty line began before the new bytes");
        assert!(may_end_head(b"HTTP/1.1 200 OK\n\n", 17));
        assert!(!may_end_head(b"HTTP/1.1 200 OK\r\n\r", 17), "not yet");
    }

    #[test]
    fn bad_heads_are_errors_that_say_why() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le", false), Ok(Parsed::Partial));
        assert_eq!(parse_head(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1", false), Ok(Parsed::Interim(25)));
        let garbage = parse_head(b"SSH-2.0-OpenSSH_9.6\r\n\r\n", false).unwrap_err();
        assert!(garbage.starts_with("not an HTTP/1.x answer"), "{garbage}");
        let huge = format!("HTTP/1.1 200 OK\r\nx-pad: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(parse_head(huge.as_bytes(), false).unwrap_err(), "the answer's head is longer than 64 KiB");
        // Still incomplete past the limit: an error, not a wait for more.
        let endless = format!("HTTP/1.1 200 OK\r\nx-pad: {}", "a".repeat(MAX_HEAD + 1));
        assert_eq!(parse_head(endless.as_bytes(), false).unwrap_err(), "the answer's head is longer than 64 KiB");
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert_eq!(parse_head(many.as_bytes(), false).unwrap_err(), "the answer has more than 64 header fields");
        let fields: String = (0..MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
        assert!(matches!(
            parse_head(format!("HTTP/1.1 200 OK\r\n{fields}\r\n").as_bytes(), false),
            Ok(Parsed::Complete(..))
        ));
        for length in ["-1", "1x", "", "99999999999999999999"] {
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n");
            assert!(parse_head(head.as_bytes(), false).unwrap_err().starts_with("invalid Content-Length"), "{length}");
        }
        let twice = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\n";
        assert_eq!(parse_head(twice, false).unwrap_err(), "conflicting Content-Length values");
    }

    /// Every way of splitting `answer` into reads gives the same outcome.
    fn every_split(answer: &str, limit: usize) -> Result<(u16, Vec<u8>), String> {
        let bytes = answer.as_bytes();
        let whole = read_answer(bytes, &[bytes.len()], false, limit);
        for piece in 1..bytes.len().min(40) {
            assert_eq!(read_answer(bytes, &[piece], false, limit), whole, "pieces of {piece}");
            assert_eq!(read_answer(bytes, &[piece, 1, 7], false, limit), whole, "pieces of {piece}, 1, 7");
        }
        whole
    }

    #[test]
    fn answers_read_in_any_pieces_give_the_same_body() {
        let body = |text: &str| Ok((200, text.as_bytes().to_vec()));
        assert_eq!(every_split("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"age\":45}", 100), body("{\"age\":45}"));
        let chunked = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            4;name=value\r\n{\"ag\r\nA \r\ne\":45,\"x\":\r\n1;a;b=\"c\"\r\n1\r\n0\r\nexpires: never\r\nx: y\r\n\r\n";
        assert_eq!(every_split(chunked, 100), body("{\"age\":45,\"x\":1"));
        let interim = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
            HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(every_split(interim, 100), Ok((201, b"{}".to_vec())));
        assert_eq!(every_split("HTTP/1.0 200 OK\r\n\r\nuntil the end", 100), body("until the end"));
    }

    #[test]
    fn bodies_that_break_the_rules_are_errors() {
        let closed = "the connection closed before the body ended".to_string();
        assert_eq!(every_split("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{\"age\"", 100), Err(closed.clone()));
        let cut = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabc";
        assert_eq!(every_split(cut, 100), Err(closed.clone()));
        let no_last_chunk = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n";
        assert_eq!(every_split(no_last_chunk, 100), Err(closed));
        let too_long = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n";
        assert_eq!(every_split(too_long, 100), Err("a chunk's data is not followed by CRLF".into()));
        let empty_size = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\r\n";
        assert_eq!(every_split(empty_size, 100), Err("invalid chunk size line".into()));
        let over = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n";
        assert_eq!(every_split(over, 10), Err("the body exceeds the 10 byte limit".into()));
        let announced = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffffff\r\nab";
        assert_eq!(every_split(announced, 10), Err("the body exceeds the 10 byte limit".into()));
        let endless_size = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;{}", "e".repeat(MAX_HEAD));
        assert_eq!(
            read_answer(endless_size.as_bytes(), &[4096], false, 100),
            Err("a chunk size line longer than 64 KiB".into())
        );
        let trailers =
            format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nx: {}\r\n", "t".repeat(MAX_HEAD));
        assert_eq!(
            read_answer(trailers.as_bytes(), &[4096], false, 100),
            Err("trailer fields longer than 64 KiB".into())
        );
    }

    #[test]
    fn a_chunked_body_leaves_the_next_answer_untouched() {
        let two = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n";
        let Ok(Parsed::Complete(head, length)) = parse_head(two, false) else { panic!() };
        let mut body = Body::new(head.framing);
        let mut out = Vec::new();
        let used = body.decode(&two[length..], &mut out, 100).unwrap();
        assert!(body.is_done());
        assert_eq!((out.as_slice(), &two[length + used..]), (b"{}".as_slice(), b"HTTP/1.1 200 OK\r\n".as_slice()));
    }
}
