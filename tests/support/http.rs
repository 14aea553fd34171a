//! A minimal HTTP/1.1 client over one keep-alive connection, and a way to
//! run `locus serve`: enough to test and load the service on loopback
//! without another dependency. In a test, every answer the client reads is
//! checked against the OpenAPI description (support/openapi.rs).
#![allow(dead_code)]

#[path = "openapi.rs"]
pub mod openapi;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One connection; requests are sent one after the other.
pub struct Client {
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
    /// The server said it closes the connection: reconnect before the next request.
    closed: bool,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        s.set_nodelay(true)?;
        Ok(Client {
            reader: BufReader::new(s),
            addr,
            closed: false,
        })
    }

    /// Sends a JSON request and returns the status and the body.
    pub fn request(&mut self, method: &str, path: &str, body: &str) -> io::Result<(u16, String)> {
        let r = self.send(
            method,
            path,
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )?;
        Ok((r.status, String::from_utf8_lossy(&r.body).into_owned()))
    }

    /// Sends a request with `headers` and returns the whole answer.
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Reply> {
        if self.closed {
            *self = Client::connect(self.addr)?;
        }
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let s = self.reader.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        s.flush()?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| io::Error::other(format!("bad status line {line:?}")))?;
        let mut len = None;
        let mut chunked = false;
        let mut answer_headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let lower = l.to_ascii_lowercase();
            if let Some((k, v)) = lower.split_once(':') {
                answer_headers.push((k.trim().to_string(), v.trim().to_string()));
            }
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse::<usize>().ok();
            }
            if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
            if lower.starts_with("connection:") && lower.contains("close") {
                self.closed = true;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim(), 16)
                    .map_err(|e| io::Error::other(format!("bad chunk size {line:?}: {e}")))?;
                let mut chunk = vec![0; n + 2];
                self.reader.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            let mut b = vec![0; len.unwrap_or(0)];
            self.reader.read_exact(&mut b)?;
            body = b;
        }
        let reply = Reply {
            status,
            headers: answer_headers,
            body,
        };
        #[cfg(test)]
        if let Err(e) = openapi::check(method, path, reply.status, &reply.headers, &reply.body) {
            panic!("an answer the OpenAPI description does not declare: {e}");
        }
        Ok(reply)
    }
}

/// An answer: status, headers (names lower-case), body.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The `locus` executable (built with the `serve` feature for the tests
/// and benchmarks that use this file).
pub fn locus_binary() -> PathBuf {
    option_env!("CARGO_BIN_EXE_locus")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("the locus binary is not built (feature `serve`)"))
}

/// A running `locus serve`, killed when dropped.
pub struct Service {
    pub child: Child,
    pub addr: SocketAddr,
    /// It printed `listening on https://`.
    pub https: bool,
    /// What it wrote on stderr so far.
    pub stderr: Arc<Mutex<String>>,
}

impl Service {
    /// Starts `locus serve` with `args` on 127.0.0.1 and a free port, and
    /// waits (up to `timeout`) until `/readyz` answers 200.
    pub fn start(args: &[&str], timeout: Duration) -> Service {
        Service::start_with_env(args, &[], timeout)
    }

    /// [`Service::start`] with `env` set in the service's environment.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Service {
        let t0 = Instant::now();
        let mut svc = Service::launch(args, env, timeout);
        loop {
            let ready = Client::connect(svc.addr)
                .and_then(|mut c| c.request("GET", "/readyz", ""))
                .is_ok_and(|(status, _)| status == 200);
            if ready {
                break svc;
            }
            if !svc.running() {
                std::thread::sleep(Duration::from_millis(200));
                let err = svc.stderr.lock().unwrap_or_else(|p| p.into_inner()).clone();
                panic!("the service exited before it was ready: {err}");
            }
            assert!(
                t0.elapsed() < timeout,
                "the service was not ready within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `locus serve` with `args` and `env` on 127.0.0.1 and a free
    /// port, and waits (up to `timeout`) for its `listening on
    /// http://ADDR` (or `https://`) line only.
    pub fn launch(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Service {
        let mut child = Command::new(locus_binary())
            .arg("serve")
            .args(args)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .env("NODEVICE_SELECT", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start locus serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(e) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(e).lines().map_while(Result::ok) {
                    let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(a) = line.strip_prefix("listening on ") {
                    let _ = tx.send(a.trim().to_string());
                }
            }
        });
        let t0 = Instant::now();
        let url = loop {
            if let Ok(a) = rx.recv_timeout(Duration::from_millis(100)) {
                break a;
            }
            if let Some(status) = child.try_wait().expect("child status") {
                std::thread::sleep(Duration::from_millis(200));
                let err = stderr.lock().unwrap_or_else(|p| p.into_inner()).clone();
                panic!("the service exited with {status} before listening: {err}");
            }
            if t0.elapsed() > timeout {
                let _ = child.kill();
                panic!("the service did not listen within {timeout:?}");
            }
        };
        let (https, addr) = match url.split_once("://") {
            Some(("https", a)) => (true, a),
            Some(("http", a)) => (false, a),
            _ => panic!("printed {url:?}, not http(s)://ADDR"),
        };
        Service {
            child,
            addr: addr.parse().expect("printed address"),
            https,
            stderr,
        }
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh folder under the system temp dir, created atomically with a
/// random name (so concurrent tests never share one) and removed when the
/// value is dropped.
pub fn temp_folder(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("locus-{tag}-"))
        .tempdir()
        .expect("temp dir")
}

/// A fresh folder as [`temp_folder`], kept after the call: the caller
/// removes it.
pub fn temp_dir(tag: &str) -> PathBuf {
    temp_folder(tag).keep()
}

/// The CPU time (user + system, seconds) the process `pid` (`None`: this
/// one) has used, from `/proc` (Linux).
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (in parentheses): utime and stime are
    // the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // The kernel's USER_HZ is 100 on every Linux architecture.
    Some(ticks / 100.0)
}
