//! JSON bodies for the answers hyper writes itself.
//!
//! A request hyper cannot parse (a garbage request line, a malformed or
//! conflicting `Content-Length`, more headers than allowed, a URI too long)
//! never reaches the router: hyper answers it with a bodiless
//! `400`/`414`/`431`, `content-length: 0`, and closes the connection, and
//! offers no hook to give that answer a body. [`JsonErrors`] wraps the
//! connection's socket and, when hyper writes such an answer, writes the
//! same status with a JSON body `{"error": "..."}` instead.
//!
//! The automatic answers are recognised by their head alone: a `4xx` whose
//! `content-length` is `0`. Every error answer of the routes has a JSON body
//! (see `http::json_errors`), so no answer of theirs can be mistaken for one.
//!
//! Imports: nothing of the service.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::rt::{Read, ReadBufCursor, Write};
use serde_json::json;

/// Most headers a request may have (hyper's default, set explicitly so the
/// `431` answer can name it).
pub const MAX_HEADERS: usize = 100;

/// A connection's socket whose automatic protocol-error answers get a JSON
/// body.
pub struct JsonErrors<I> {
    inner: I,
    /// The answer written in place of hyper's, and how much of it is sent.
    replacement: Option<(Vec<u8>, usize)>,
}

impl<I> JsonErrors<I> {
    /// Wraps a connection's socket.
    pub fn new(inner: I) -> Self {
        JsonErrors {
            inner,
            replacement: None,
        }
    }
}

/// The status of an automatic answer hyper writes for a request it could
/// not parse, if `head` is one: a complete response head of status 400,
/// 414 or 431 with `content-length: 0`, and nothing after it.
fn automatic_error(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.1 ")?;
    let status = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    if !matches!(status, 400 | 414 | 431) || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    // Exactly one blank line: the head ends the buffer, no body follows.
    let text = std::str::from_utf8(head).ok()?.to_ascii_lowercase();
    let end = text.find("\r\n\r\n")?;
    (end + 4 == text.len() && text.contains("\r\ncontent-length: 0\r\n")).then_some(status)
}

/// The answer written instead of hyper's automatic one for `status`.
fn json_answer(status: u16) -> Vec<u8> {
    let (reason, kind, msg) = match status {
        431 => (
            "Request Header Fields Too Large",
            "headers_too_large",
            format!(
                "request header fields too large: send at most {MAX_HEADERS} headers, \
                 and headers of a few kilobytes"
            ),
        ),
        414 => (
            "URI Too Long",
            "uri_too_long",
            "the request URI is too long".to_string(),
        ),
        _ => (
            "Bad Request",
            "bad_request",
            "malformed HTTP request: the request line, a header or the Content-Length \
             could not be parsed (Content-Length must be one non-negative integer)"
                .to_string(),
        ),
    };
    let body = json!({ "error": msg, "kind": kind }).to_string();
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<I: Write + Unpin> JsonErrors<I> {
    /// Writes the replacement answer (if any) in full; then reports `len`
    /// bytes of hyper's written.
    fn poll_replace(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<usize>> {
        if let Some((bytes, sent)) = &mut self.replacement {
            while *sent < bytes.len() {
                let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                *sent += n;
            }
        }
        // hyper closes the connection after an automatic answer; anything
        // more it would write is dropped with its own answer.
        Poll::Ready(Ok(len))
    }
}

impl<I: Read + Unpin> Read for JsonErrors<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: Write + Unpin> Write for JsonErrors<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.replacement.is_none() {
            match automatic_error(buf) {
                Some(status) => this.replacement = Some((json_answer(status), 0)),
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
            }
        }
        this.poll_replace(cx, buf.len())
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let len = bufs.iter().map(|b| b.len()).sum();
        if this.replacement.is_none() {
            // An automatic answer is a head alone: one non-empty buffer.
            let mut parts = bufs.iter().filter(|b| !b.is_empty());
            let status = match (parts.next(), parts.next()) {
                (Some(head), None) => automatic_error(head),
                _ => None,
            };
            match status {
                Some(status) => this.replacement = Some((json_answer(status), 0)),
                None => return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs),
            }
        }
        this.poll_replace(cx, len)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
