//! `application/x-www-form-urlencoded` bodies (the invitation form), decoded strictly: a bad
//! percent escape or invalid UTF-8 drops the pair.

/// The value of `name` in a form body.
pub(crate) fn field(body: &[u8], name: &str) -> Option<String> {
    pairs(body)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

pub(crate) fn pairs(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;

    #[test]
    fn form_email_is_decoded() {
        assert_eq!(
            field(b"email=ann%40example.com", "email"),
            Some("ann@example.com".into())
        );
        assert_eq!(
            field(b"x=1&email=a+b%40c.d", "email"),
            Some("a b@c.d".into())
        );
        assert_eq!(field(b"email=%zz", "email"), None);
    }
}
