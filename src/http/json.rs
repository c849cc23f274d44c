//! What the HTTP fittings write by hand: [`Json`], a JSON string (no
//! serde in the library's HTTP path), for the look inside's data and the
//! layer's refusal bodies; and [`response`], a response of bytes with its
//! content type, for the answers both write themselves.

use std::fmt::{self, Write as _};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

/// A response of `status` whose body is `body`, of `content_type`.
pub(crate) fn response(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Bytes> {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON string, quoted, with `<`, `>`, `&` and the line separators
/// escaped too (so it is safe inside an HTML `<script>` element).
pub(crate) struct Json<'a>(pub(crate) &'a str);

impl fmt::Display for Json<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => write!(f, "\\u{:04x}", c as u32)?,
                c if (c as u32) < 0x20 || c == '\u{7f}' => write!(f, "\\u{:04x}", c as u32)?,
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}
