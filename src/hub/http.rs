//! HTTP for the hub client: one `ureq` agent with the timeouts, redirects followed here (so that the token goes
//! only to the endpoint's own origin, never to the storage a download redirects to), and bounded bodies.

use std::io::Read;

use ureq::http::Response;
use ureq::Body;

use super::error::HubError;
use super::settings::HubSettings;

/// Redirects followed for one request: the hub sends one (to its storage), a renamed repository one more.
const MAX_REDIRECTS: usize = 8;
/// The most of an error body kept for the message.
const ERROR_DETAIL_LIMIT: u64 = 2048;

/// An HTTP client for one endpoint.
pub struct Http {
    agent: ureq::Agent,
    origin: String,
    token: Option<String>,
}

impl Http {
    pub fn new(settings: &HubSettings) -> Self {
        let timeout = Some(settings.timeout);
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(timeout)
            .timeout_recv_response(timeout)
            .timeout_per_read(timeout)
            .timeout_send_request(timeout)
            .user_agent(concat!("ember/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Http { agent, origin: origin_of(&settings.endpoint).to_owned(), token: settings.token.clone() }
    }

    /// GETs `url`, from byte `from` on when it is not 0, following redirects. Any status is returned: the caller
    /// decides what it accepts.
    pub fn get(&self, url: &str, from: u64) -> Result<Response<Body>, HubError> {
        let mut url = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self.agent.get(&url);
            if let (Some(token), true) = (&self.token, origin_of(&url) == self.origin) {
                request = request.header("Authorization", format!("Bearer {token}"));
            }
            if from > 0 {
                request = request.header("Range", format!("bytes={from}-"));
            }
            let response = request.call().map_err(|e| HubError::Network { url: url.clone(), reason: e.to_string() })?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let location = response.headers().get("location").and_then(|l| l.to_str().ok());
            let Some(location) = location else {
                return Err(HubError::BadResponse { url, reason: "a redirect without a Location".into() });
            };
            url = join_location(&url, location).ok_or_else(|| HubError::BadResponse {
                url: url.clone(),
                reason: format!("a redirect to {location:?}, which is neither http(s) nor a path"),
            })?;
        }
        Err(HubError::BadResponse { url, reason: format!("more than {MAX_REDIRECTS} redirects") })
    }

    /// GETs `url` and reads its body, at most `limit` bytes, when the status is 200.
    pub fn get_bytes(&self, url: &str, limit: u64) -> Result<Vec<u8>, HubError> {
        let mut response = self.get(url, 0)?;
        if response.status() != 200 {
            return Err(status_error(url, &mut response));
        }
        let mut body = Vec::new();
        let reader = response.body_mut().as_reader();
        reader
            .take(limit + 1)
            .read_to_end(&mut body)
            .map_err(|e| HubError::Network { url: url.to_owned(), reason: e.to_string() })?;
        if body.len() as u64 > limit {
            return Err(HubError::BadResponse { url: url.to_owned(), reason: format!("a body over {limit} bytes") });
        }
        Ok(body)
    }
}

/// The error for a response of an unexpected status, with the start of its body (the hub's JSON `error`).
pub fn status_error(url: &str, response: &mut Response<Body>) -> HubError {
    let status = response.status().as_u16();
    let mut detail = String::new();
    let _ = response.body_mut().as_reader().take(ERROR_DETAIL_LIMIT).read_to_string(&mut detail);
    let detail = match serde_json::from_str::<serde_json::Value>(&detail) {
        Ok(json) => json.get("error").and_then(|e| e.as_str()).unwrap_or("").to_owned(),
        Err(_) => detail.chars().filter(|c| !c.is_control()).take(200).collect(),
    };
    HubError::Status { url: url.to_owned(), status, detail }
}

/// `scheme://host[:port]` of `url`.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// Where a redirect from `base` to `location` goes: an absolute http(s) URL, or a path on `base`'s origin.
fn join_location(base: &str, location: &str) -> Option<String> {
    if location.starts_with("http://") || location.starts_with("https://") {
        return Some(location.to_owned());
    }
    location.starts_with('/').then(|| format!("{}{location}", origin_of(base)))
}

/// `path` with each character outside a URL path's unreserved ones percent-encoded (`/` kept).
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => out.push(byte as char),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_and_origins() {
        assert_eq!(origin_of("https://h.example:8080/a/b"), "https://h.example:8080");
        assert_eq!(origin_of("http://127.0.0.1:9"), "http://127.0.0.1:9");
        assert_eq!(join_location("http://a:1/x/y", "/z?q=1").as_deref(), Some("http://a:1/z?q=1"));
        assert_eq!(join_location("http://a:1/x", "https://b/c").as_deref(), Some("https://b/c"));
        assert_eq!(join_location("http://a:1/x", "ftp://b/c"), None);
        assert_eq!(encode_path("dir/m Q4+1.gguf"), "dir/m%20Q4%2B1.gguf");
    }
}
