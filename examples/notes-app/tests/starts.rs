//! The app starts on a fresh database and answers as an MCP client first
//! meets it: a 401 challenge naming its metadata and the read scope, and
//! the metadata documents. (The whole flow with an MCP client is
//! `e2e/run.sh`, with the official Python SDK.)
#![allow(clippy::unwrap_used, reason = "a test fails loudly where it unwraps")]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};

/// One HTTP/1.1 exchange on a fresh connection: status line, headers and
/// body as text.
fn http(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn a_fresh_app_challenges_an_agent_and_serves_its_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = Command::new(env!("CARGO_BIN_EXE_notes-app"))
        .env("NOTES_ADDR", "127.0.0.1:0")
        .env("NOTES_DB", dir.path().join("notes.redb"))
        .env("NOTES_KEYS", dir.path().join("notes.keys"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(app.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr = first.trim_start_matches("Notes on ").to_owned();
    let mcp = lines.next().unwrap().unwrap();
    let mcp = mcp.trim().trim_start_matches("MCP URL: ").to_owned();
    let path = mcp.split_once(&addr).unwrap().1.to_owned();

    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let answer = http(
        &addr,
        &format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{ping}",
            ping.len()
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let metadata = format!("http://{addr}/.well-known/oauth-protected-resource{path}");
    assert!(
        answer.contains(&format!(
            "resource_metadata=\"{metadata}\", scope=\"notes:read\""
        )),
        "{answer}"
    );

    let document = http(
        &addr,
        &format!(
            "GET /.well-known/oauth-protected-resource{path} HTTP/1.1\r\nHost: {addr}\r\n\
             Connection: close\r\n\r\n"
        ),
    );
    assert!(document.starts_with("HTTP/1.1 200"), "{document}");
    assert!(
        document.contains(&format!("\"resource\":\"{mcp}\"")),
        "{document}"
    );
    assert!(
        document.contains("\"scopes_supported\":[\"notes:read\",\"notes:write\"]"),
        "{document}"
    );
    app.kill().unwrap();
    app.wait().unwrap();
}
